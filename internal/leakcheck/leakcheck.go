// Package leakcheck runs a package's tests under go.uber.org/goleak with the
// one list of long-lived library goroutines that are not leaks, so every
// package ignores the same few and nothing else.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Known lists the goroutines libraries keep on purpose after their servers
// or clients closed.
var Known = []goleak.Option{
	// fasthttp (under fiber) starts one process-wide goroutine that updates
	// the Date header every second, on first use, and never stops it.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// A fasthttp worker pool's cleaner sleeps up to its idle duration (10 s)
	// before it notices that its server shut down.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
}

// VerifyTestMain runs the tests and fails the package if goroutines other
// than the Known ones (and those in extra) are left when they pass.
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option(nil), Known...), extra...)...)
}
