package instance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
)

// countingStore counts the store's write calls; failing makes WriteChange
// fail.
type countingStore struct {
	db.Store
	mu      sync.Mutex
	writes  map[string]int
	failing bool
}

var errStoreDown = errors.New("store down")

func (c *countingStore) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[name]++
}

func (c *countingStore) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = map[string]int{}
	return w
}

func (c *countingStore) UpdateInstanceWithTimeline(ctx context.Context, in *record.Instance, entries ...*record.TimelineEntry) error {
	c.count("UpdateInstanceWithTimeline")
	return c.Store.UpdateInstanceWithTimeline(ctx, in, entries...)
}

func (c *countingStore) AppendTimeline(ctx context.Context, entries ...*record.TimelineEntry) error {
	c.count("AppendTimeline")
	return c.Store.AppendTimeline(ctx, entries...)
}

func (c *countingStore) AppendEvent(ctx context.Context, ev *events.Record) error {
	c.count("AppendEvent")
	return c.Store.AppendEvent(ctx, ev)
}

func (c *countingStore) WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	c.count("WriteChange")
	c.mu.Lock()
	failing := c.failing
	c.mu.Unlock()
	if failing {
		return errStoreDown
	}
	return c.Store.(changeWriter).WriteChange(ctx, in, entries, evs)
}

// TestDeclarationIsOneWrite checks that a Ready declaration (the record's
// flag, its timeline entry and instance-ready) is one store write, and an
// agent state change (timeline and event, no record) too; that the event
// is delivered once the change is visible (a subscriber that reads the
// instance on instance-ready finds it Ready) with the id the store gave
// it; and that a declaration whose write fails changes nothing and
// announces nothing.
func TestDeclarationIsOneWrite(t *testing.T) {
	e := newEnv(t)
	cs := &countingStore{Store: e.store, writes: map[string]int{}}
	e.store = cs
	e.bus = events.New(cs)
	t.Cleanup(func() { _ = e.bus.Close() })
	e.m = e.manager()
	e.m.retry = writeRetry{initial: time.Millisecond, max: time.Millisecond, elapsed: 10 * time.Millisecond, attempt: time.Second}
	inst := e.create("one", nil)
	if err := e.m.Start(bg, "one", adminCaller); err != nil {
		t.Fatal(err)
	}
	sub, err := e.bus.Subscribe(events.Filter{Instances: []string{"one"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// next returns the next lifecycle action, and whether the instance
	// was Ready when it arrived.
	next := func() (string, int64, bool) {
		t.Helper()
		select {
		case ev := <-sub.C():
			lc, err := ev.Lifecycle()
			if err != nil {
				t.Fatal(err)
			}
			return lc.Action, ev.ID, e.get("one").Config[KeyReady] == "true"
		case <-time.After(30 * time.Second):
			t.Fatal("no event")
		}
		return "", 0, false
	}

	cases := []struct {
		name   string
		do     func() error
		want   map[string]int
		action string
	}{
		{"first Ready: record, timeline and event", func() error { return e.m.SetReady(bg, inst.UUID, true, events.Requestor{}) },
			map[string]int{"WriteChange": 1}, events.InstanceReady},
		{"repeated Ready: timeline and event", func() error { return e.m.SetReady(bg, inst.UUID, true, events.Requestor{}) },
			map[string]int{"WriteChange": 1}, events.InstanceReady},
		{"agent connected: timeline and event", func() error {
			return e.m.SetAgentState(bg, inst.UUID, AgentConnected, time.Now())
		}, map[string]int{"WriteChange": 1}, events.InstanceAgentConnected},
	}
	for _, c := range cases {
		cs.reset()
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		action, id, ready := next()
		if got := cs.reset(); len(got) != len(c.want) || got["WriteChange"] != c.want["WriteChange"] {
			t.Errorf("%s: writes %v, want %v", c.name, got, c.want)
		}
		if action != c.action || !ready || id == 0 {
			t.Errorf("%s: got %s (id %d, instance ready %v), want %s with an id, the instance Ready", c.name, action, id, ready, c.action)
		}
		stored, err := e.store.EventsAfter(bg, id-1, 1)
		if err != nil || len(stored) != 1 || stored[0].ID != id {
			t.Errorf("%s: event %d not in the store: %v %v", c.name, id, stored, err)
		}
	}

	// A failing write: the Ready flag stays as it was, nothing is
	// announced, and a later event is still delivered (the failed one
	// gave up its place in the order).
	if err := e.m.SetReady(bg, inst.UUID, false, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	if action, _, _ := next(); action != events.InstanceUnready {
		t.Fatalf("got %s, want %s", action, events.InstanceUnready)
	}
	cs.mu.Lock()
	cs.failing = true
	cs.mu.Unlock()
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); !errors.Is(err, errStoreDown) {
		t.Fatalf("Ready with the store down: %v, want %v", err, errStoreDown)
	}
	if got := e.get("one").Config[KeyReady]; got != "false" {
		t.Errorf("Ready flag %q after a failed declaration, want false", got)
	}
	cs.mu.Lock()
	cs.failing = false
	cs.mu.Unlock()
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	if action, _, ready := next(); action != events.InstanceReady || !ready {
		t.Fatalf("after the store came back: got %s (ready %v), want %s", action, ready, events.InstanceReady)
	}
}

// heldStore holds the first WriteChange after holding is set until release
// is closed, after saying so on entered.
type heldStore struct {
	db.Store
	holding atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldStore) WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	if h.holding.CompareAndSwap(true, false) { // the first write once holding
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.(changeWriter).WriteChange(ctx, in, entries, evs)
}

// TestHeartbeatNotBehindChange records an agent's heartbeat while a change
// of the same instance (a Ready declaration) waits for its store write: the
// heartbeat must not wait for that write (a plugin delivers every guest's
// heartbeats from one goroutine; in a 10,000-guest storm, heartbeats held
// behind declarations' writes stalled it and agents were declared lost),
// and once the declaration commits, the view shows both the declaration's
// Ready and the heartbeat (later than the one the change started from).
func TestHeartbeatNotBehindChange(t *testing.T) {
	e := newEnv(t)
	hs := &heldStore{Store: e.store, entered: make(chan struct{}), release: make(chan struct{})}
	e.store = hs
	e.bus = events.New(hs)
	t.Cleanup(func() { _ = e.bus.Close() })
	e.m = e.manager()
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	// A first heartbeat goes through a change (not held yet).
	if err := e.m.SetAgentState(bg, inst.UUID, AgentConnected, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	hs.holding.Store(true)
	declared := make(chan error, 1)
	go func() {
		declared <- e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredReady}, events.Requestor{Protocol: "devlxd"})
	}()
	select {
	case <-hs.entered: // the declaration holds its change (and the instance's lock)
	case err := <-declared:
		t.Fatalf("the declaration ended before its write: %v", err)
	}
	beat := make(chan bool, 1)
	go func() { beat <- e.m.RecordHeartbeat(inst.UUID, AgentConnected, time.Unix(200, 0)) }()
	select {
	case ok := <-beat:
		if !ok {
			t.Error("an unchanged state's heartbeat was not recorded")
		}
	case <-time.After(10 * time.Second): // a bound for the failure only: it returns at once
		close(hs.release)
		t.Fatal("a heartbeat waited for another change's store write")
	}
	close(hs.release)
	if err := <-declared; err != nil {
		t.Fatal(err)
	}
	got := e.get("web1")
	if got.Status != "Ready" {
		t.Errorf("after the declaration: %s", got.Status)
	}
	if got.Agent.LastHeartbeat == nil || !got.Agent.LastHeartbeat.Equal(time.Unix(200, 0)) {
		t.Errorf("heartbeat %v, want the one recorded during the change (200)", got.Agent.LastHeartbeat)
	}
	list, err := e.m.List(bg, ListFilter{})
	if err != nil || len(list) != 1 || list[0].Agent.LastHeartbeat == nil || !list[0].Agent.LastHeartbeat.Equal(time.Unix(200, 0)) {
		t.Errorf("listed heartbeat %+v, %v; want 200", list, err)
	}

	// A new boot clears the heartbeat: the old boot's is not shown.
	if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Agent.LastHeartbeat != nil {
		t.Errorf("a stopped guest shows a heartbeat: %v", got.Agent.LastHeartbeat)
	}
}
