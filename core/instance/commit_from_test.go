package instance

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
)

// fromStore checks, at each WriteChangeFrom, that the record the manager
// gives as prev is the row the store holds (read from the store just
// before the write), and counts the writes by method.
type fromStore struct {
	db.Store
	mu     sync.Mutex
	writes map[string]int
	wrong  []string
}

func (f *fromStore) WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	f.mu.Lock()
	f.writes["WriteChange"]++
	f.mu.Unlock()
	return f.Store.(changeWriter).WriteChange(ctx, in, entries, evs)
}

func (f *fromStore) WriteChangeFrom(ctx context.Context, prev, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	row, err := f.Store.GetInstance(ctx, in.Name)
	f.mu.Lock()
	f.writes["WriteChangeFrom"]++
	if err != nil || !reflect.DeepEqual(row, prev) {
		f.wrong = append(f.wrong, fmt.Sprintf("prev %+v, the row %+v (%v)", prev, row, err))
	}
	f.mu.Unlock()
	return f.Store.(changeFromWriter).WriteChangeFrom(ctx, prev, in, entries, evs)
}

func (f *fromStore) UpdateInstanceWithTimeline(ctx context.Context, in *record.Instance, entries ...*record.TimelineEntry) error {
	f.mu.Lock()
	f.writes["UpdateInstanceWithTimeline"]++
	f.mu.Unlock()
	return f.Store.UpdateInstanceWithTimeline(ctx, in, entries...)
}

// TestChangeWritesFromStoredRecord makes the changes that save an
// instance's record (a start, a Ready declaration, its withdrawal, a
// stop) and checks that each is written by WriteChangeFrom from the record
// the store holds (the row read just before the write equals prev; a
// manager that gave the record it keeps in memory after a change it did
// not save would fail here), and that after each the row equals the
// manager's record.
func TestChangeWritesFromStoredRecord(t *testing.T) {
	e := newEnv(t)
	fs := &fromStore{Store: e.store, writes: map[string]int{}}
	e.store = fs
	e.bus = events.New(fs)
	t.Cleanup(func() { _ = e.bus.Close() })
	e.m = e.manager()
	inst := e.create("one", map[string]string{"user.role": "web"})
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"start", func() error { return e.m.Start(bg, "one", adminCaller) }},
		{"Ready", func() error { return e.m.SetReady(bg, inst.UUID, true, events.Requestor{}) }},
		{"Ready withdrawn", func() error { return e.m.SetReady(bg, inst.UUID, false, events.Requestor{}) }},
		{"stop", func() error { return e.m.Stop(bg, "one", StopOptions{Force: true}, adminCaller) }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		row, err := e.store.GetInstance(bg, "one")
		if err != nil {
			t.Fatal(err)
		}
		e.m.mu.RLock()
		rec := e.m.byName["one"].rec
		e.m.mu.RUnlock()
		if !reflect.DeepEqual(row, rec) {
			t.Errorf("after the %s: the row %+v, the manager's record %+v", step.name, row, rec)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.writes["WriteChangeFrom"] < 4 || fs.writes["WriteChange"] != 0 || fs.writes["UpdateInstanceWithTimeline"] != 0 {
		t.Errorf("record writes %v, want every change through WriteChangeFrom", fs.writes)
	}
	for _, w := range fs.wrong {
		t.Errorf("a write from a record the store did not hold: %s", w)
	}
}
