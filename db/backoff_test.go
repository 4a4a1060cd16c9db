package db

import (
	"testing"
	"time"
)

// TestBusyBackoff checks the waits between attempts to open a busy
// database: 5 ms doubling up to 200 ms, each with up to as much again of
// jitter.
func TestBusyBackoff(t *testing.T) {
	bo := busyBackoff()
	for i, d := range []time.Duration{5, 10, 20, 40, 80, 160, 200, 200} {
		d *= time.Millisecond
		if got := bo.NextBackOff(); got < d || got > 2*d+time.Nanosecond {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, got, d, 2*d)
		}
	}
}
