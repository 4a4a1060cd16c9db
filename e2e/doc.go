// Package e2e holds guestlink's process-level tests and benchmarks: they
// build the real binaries (internal/testbin), start guestlinkd with its
// plugins, QEMU guests, PostgreSQL and browsers as processes, and talk to
// them only through what users have: the CLI, the admin API, devlxd
// sockets, the dashboard. The harness is harness_test.go; what each file
// covers is in docs/architecture.md ("Tests").
//
// The package has no code of its own: it sits beside the composition root
// (daemon/), which stays small, as Nomad keeps its e2e/ tree.
package e2e
