package statebudget

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestBudget walks one instance's budget on synctest's fake clock: the burst,
// the refill, the cap at the burst, and the independence of instances.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(10, 3)
		start := time.Now()
		steps := []struct {
			name  string
			at    time.Duration // since start
			uuid  string
			allow bool
			wait  time.Duration // Wait after the step
		}{
			{"burst 1", 0, "a", true, 0},
			{"burst 2", 0, "a", true, 0},
			{"burst 3", 0, "a", true, 100 * time.Millisecond},
			{"burst spent", 0, "a", false, 100 * time.Millisecond},
			{"other instance has its own budget", 0, "b", true, 0},
			{"not yet refilled", 50 * time.Millisecond, "a", false, 50 * time.Millisecond},
			{"one change after 100ms", 100 * time.Millisecond, "a", true, 100 * time.Millisecond},
			{"and only one", 100 * time.Millisecond, "a", false, 100 * time.Millisecond},
			{"refill capped at burst 1", time.Hour, "a", true, 0},
			{"refill capped at burst 2", time.Hour, "a", true, 0},
			{"refill capped at burst 3", time.Hour, "a", true, 100 * time.Millisecond},
			{"refill capped at burst", time.Hour, "a", false, 100 * time.Millisecond},
		}
		for _, st := range steps {
			if d := time.Until(start.Add(st.at)); d > 0 {
				time.Sleep(d) // fake clock: advances at once
			}
			if got := b.Allow(st.uuid); got != st.allow {
				t.Fatalf("%s: Allow(%q) at +%v = %v, want %v", st.name, st.uuid, st.at, got, st.allow)
			}
			if got := b.Wait(st.uuid); got != st.wait {
				t.Fatalf("%s: Wait(%q) = %v, want %v", st.name, st.uuid, got, st.wait)
			}
		}
	})
}

// TestBudgetForgetsIdleInstances checks that the buckets of instances that
// stopped changing state do not accumulate.
func TestBudgetForgetsIdleInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(1, 2)
		b.Allow("busy")
		b.Allow("busy")
		for i := range 3 * maxIdle {
			b.Allow(fmt.Sprint("idle-", i))
			time.Sleep(time.Millisecond)
		}
		if n := len(b.buckets); n > maxIdle {
			t.Fatalf("%d buckets kept, want at most %d", n, maxIdle)
		}
	})
}

func TestNewDefaults(t *testing.T) {
	b := New(0, 0)
	if b.Rate() != DefaultRate || b.Burst() != DefaultBurst {
		t.Fatalf("New(0, 0) = rate %v burst %d, want %v %d", b.Rate(), b.Burst(), DefaultRate, DefaultBurst)
	}
}
