package pluginhost

import (
	"context"
	"time"
)

// SetWait replaces h's wait between restarts, for tests on a fake clock:
// f is called with each backoff instead of sleeping, and the supervisor
// goes on at once (unless ctx ended). Call it before Start.
func SetWait(h *Host, f func(d time.Duration)) {
	h.wait = func(ctx context.Context, d time.Duration, _ <-chan struct{}) bool {
		f(d)
		return ctx.Err() == nil
	}
}

// Pings returns how many health pings h sent to plugin name (-1: unknown).
func Pings(h *Host, name string) int64 {
	m := h.plugins[name]
	if m == nil {
		return -1
	}
	return m.pings.Load()
}
