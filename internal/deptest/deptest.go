// Package deptest holds the import rules of the whole module in one table
// (deptest_test.go): which parts may depend on which, checked with
// `go list -deps`, as Tailscale's tstest/deptest and Nomad's import bans do.
package deptest
