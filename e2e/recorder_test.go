package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
)

// recorder collects the lifecycle actions of one instance from the admin
// event stream.
type recorder struct {
	t    *testing.T
	name string

	mu      sync.Mutex
	events  []api.Event
	actions []string
	changed chan struct{}
	err     error
}

// record subscribes to the instance's lifecycle events until the test ends.
func (d *daemonProc) record(name string) *recorder { return d.recordSince(name, 0) }

// recordSince subscribes to the instance's lifecycle events after the event
// id since (0: from now on) until the test ends.
func (d *daemonProc) recordSince(name string, since int64) *recorder {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	evc, errc := d.client.Events(ctx, client.EventFilter{Types: []string{events.TypeLifecycle}, Instances: []string{name}, Since: since})
	r := &recorder{t: d.t, name: name, changed: make(chan struct{})}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for ev := range evc {
			var lc api.EventLifecycle
			if err := json.Unmarshal(ev.Metadata, &lc); err != nil {
				r.fail(fmt.Errorf("decoding lifecycle event %d: %w", ev.ID, err))
				continue
			}
			r.mu.Lock()
			if n := len(r.events); n > 0 && ev.ID <= r.events[n-1].ID {
				r.mu.Unlock()
				r.fail(fmt.Errorf("event id %d (%s) after id %d: ids must increase", ev.ID, lc.Action, r.events[n-1].ID))
				continue
			}
			r.events = append(r.events, ev)
			r.actions = append(r.actions, lc.Action)
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
		if err, ok := <-errc; ok && err != nil {
			r.fail(err)
		}
	}()
	d.t.Cleanup(func() {
		cancel()
		<-finished
	})
	return r
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// mark returns the number of actions seen so far, to count later ones.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.actions)
}

// lastID returns the id of the last event seen (0 if none).
func (r *recorder) lastID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return 0
	}
	return r.events[len(r.events)-1].ID
}

// since returns the actions after mark.
func (r *recorder) since(mark int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.actions[mark:]...)
}

// eventsSince returns the events after mark.
func (r *recorder) eventsSince(mark int) []api.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.Event(nil), r.events[mark:]...)
}

// wait waits until action has been seen n times after mark.
func (r *recorder) wait(ctx context.Context, mark int, action string, n int, within time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		r.mu.Lock()
		got := 0
		for _, a := range r.actions[mark:] {
			if a == action {
				got++
			}
		}
		err, changed, seen := r.err, r.changed, append([]string(nil), r.actions[mark:]...)
		r.mu.Unlock()
		if got >= n {
			return
		}
		if err != nil {
			r.t.Fatalf("event stream of %s failed: %v (seen %v)", r.name, err, seen)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			r.t.Fatalf("instance %s: %d %s event(s) not seen within %v; seen since mark: %v", r.name, n, action, within, seen)
		}
	}
}

// count returns how often action occurs in actions.
func count(actions []string, action string) int {
	n := 0
	for _, a := range actions {
		if a == action {
			n++
		}
	}
	return n
}
