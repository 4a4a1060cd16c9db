package devlxd

import (
	"fmt"
	"testing"
	"time"
)

func TestRateLimiter(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	now := start
	l := newRateLimiter(10, 3, func() time.Time { return now })
	steps := []struct {
		name  string
		at    time.Duration // since start
		key   string
		allow bool
	}{
		{"burst 1", 0, "a", true},
		{"burst 2", 0, "a", true},
		{"burst 3", 0, "a", true},
		{"burst spent", 0, "a", false},
		{"other key has its own bucket", 0, "b", true},
		{"not yet refilled", 50 * time.Millisecond, "a", false},
		{"one token after 100ms", 100 * time.Millisecond, "a", true},
		{"and only one", 100 * time.Millisecond, "a", false},
		{"refill capped at burst 1", time.Hour, "a", true},
		{"refill capped at burst 2", time.Hour, "a", true},
		{"refill capped at burst 3", time.Hour, "a", true},
		{"refill capped at burst", time.Hour, "a", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			now = start.Add(st.at)
			if got := l.allow(st.key); got != st.allow {
				t.Fatalf("allow(%q) at +%v = %v, want %v", st.key, st.at, got, st.allow)
			}
		})
	}
}

// TestRateLimiterForgetsIdleBuckets checks that the buckets of instances that
// stopped sending do not accumulate, and that a busy one is kept.
func TestRateLimiterForgetsIdleBuckets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newRateLimiter(1, 2, func() time.Time { return now })
	l.allow("busy")
	l.allow("busy")
	for i := range 3 * maxIdleBuckets {
		l.allow(fmt.Sprint("idle-", i))
		now = now.Add(time.Millisecond)
	}
	if n := len(l.buckets); n > maxIdleBuckets {
		t.Fatalf("%d buckets kept, want at most %d", n, maxIdleBuckets)
	}
}
