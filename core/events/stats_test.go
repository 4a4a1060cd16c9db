package events

import (
	"testing"
)

// TestStatsCountSubscribersAndOverflows checks Stats through a
// subscription's life: opened, overflowed (counted once, no longer open),
// closed normally (not an overflow).
func TestStatsCountSubscribersAndOverflows(t *testing.T) {
	b := newBus(t, SQLiteStore(t), WithBuffer(2))
	if got := b.Stats(); got != (Stats{}) {
		t.Fatalf("fresh bus: %+v, want zero", got)
	}
	slow, err := b.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	calm, err := b.Subscribe(Filter{Instances: []string{"other"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Stats(); got != (Stats{Subscribers: 2}) {
		t.Fatalf("two subscriptions: %+v", got)
	}
	publishN(t, b, 3, "web1") // slow holds 2: the third overflows it
	for range slow.C() {
	}
	if got := b.Stats(); got != (Stats{Subscribers: 1, Overflows: 1}) {
		t.Fatalf("after the overflow: %+v, want 1 subscriber and 1 overflow", got)
	}
	_ = slow.Close() // closing it again counts nothing
	_ = calm.Close()
	if got := b.Stats(); got != (Stats{Overflows: 1}) {
		t.Fatalf("after Close: %+v, want 0 subscribers and 1 overflow", got)
	}
}
