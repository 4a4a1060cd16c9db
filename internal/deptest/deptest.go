// Package deptest holds the import rules of the repository in one list
// (deptest_test.go), each with its reason, checked with `go list` as
// Tailscale's tstest/deptest and Nomad's import bans do; every rule is fed
// a deliberate break. It also keeps the allow-lists of what the CLI, the
// agent, the SDK and api link (testdata/depaware, after Tailscale's
// depaware.txt) and the docs' rule table and agent module list equal to
// the code; `go test ./internal/deptest -update` (make depaware) rewrites
// them.
package deptest
