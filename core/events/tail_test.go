package events

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// member is one cluster member's bus on a shared PostgreSQL event log,
// woken by the log's notifications as daemon/cluster.go wires it.
func member(t *testing.T, url, name string) *Bus {
	t.Helper()
	b := New(OpenStore(t, url), WithLocation(name))
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartTail(ctx); err != nil {
		t.Fatalf("member %s: starting the tail: %v", name, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { ListenEvents(ctx, url, b.Poke) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = b.Close()
	})
	return b
}

// TestTailAcrossMembers runs two members' buses on one PostgreSQL event log,
// both publishing at once: every subscriber, on either member, sees every
// event of both, in id order, with no gap and no duplicate, each named by
// the member that published it; a subscriber resuming on one member after
// an id gets the rest of both members' events.
func TestTailAcrossMembers(t *testing.T) {
	url := PostgresURL(t)
	a, b := member(t, url, "a"), member(t, url, "b")

	subA, err := a.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer subA.Close()
	subB, err := b.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer subB.Close()

	const perWriter = 150
	var wg sync.WaitGroup
	publishedBy := make(map[int64]string)
	var mu sync.Mutex
	for _, m := range []struct {
		name string
		bus  *Bus
	}{{"a", a}, {"b", b}} {
		for w := range 2 {
			wg.Go(func() {
				for i := range perWriter {
					ev, err := m.bus.Publish(context.Background(), NewLifecycle(InstanceUpdated, fmt.Sprintf("%s%d", m.name, w), map[string]any{"i": i}, nil))
					if err != nil {
						t.Errorf("member %s: publish: %v", m.name, err)
						return
					}
					mu.Lock()
					publishedBy[ev.ID] = m.name
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := 4 * perWriter

	for _, s := range []struct {
		name string
		sub  *Subscription
	}{{"a", subA}, {"b", subB}} {
		got := receive(t, s.sub, total)
		for i, ev := range got {
			if i > 0 && ev.ID != got[i-1].ID+1 {
				t.Fatalf("member %s's stream: event %d has id %d after %d (gap or duplicate)", s.name, i, ev.ID, got[i-1].ID)
			}
			if want := publishedBy[ev.ID]; ev.Location != want {
				t.Fatalf("member %s's stream: event %d has location %q, published by %q", s.name, ev.ID, ev.Location, want)
			}
		}
		if first, last := got[0].ID, got[len(got)-1].ID; publishedBy[first] == "" || publishedBy[last] == "" {
			t.Fatalf("member %s's stream: ids %d..%d are not the published ones", s.name, first, last)
		}
	}

	// Resume on b from the middle of the log: the rest of both members'
	// events, then a's live ones.
	var minID int64 = -1
	for id := range publishedBy {
		if minID < 0 || id < minID {
			minID = id
		}
	}
	after := minID + int64(total)/2 - 1
	resumed, err := b.Subscribe(Filter{After: after})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	rest := receive(t, resumed, total/2)
	for i, ev := range rest {
		if want := after + 1 + int64(i); ev.ID != want {
			t.Fatalf("resumed stream: event %d has id %d, want %d", i, ev.ID, want)
		}
	}
	live, err := a.Publish(context.Background(), NewLifecycle(InstanceUpdated, "late", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ev := receive(t, resumed, 1)[0]; ev.ID != live.ID || ev.Location != "a" {
		t.Fatalf("resumed stream: live event %d from %q, want %d from a", ev.ID, ev.Location, live.ID)
	}
}
