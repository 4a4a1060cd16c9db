package db_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
)

// testGroupCommit writes state changes from many goroutines at once and
// checks every acknowledged change is stored.
func testGroupCommit(t *testing.T, s db.Store) {
	ctx := testContext(t)
	const goroutines, perG = 24, 25
	insts := make([]*db.Instance, goroutines)
	for g := range insts {
		insts[g] = mustCreate(ctx, t, s, newInstance(fmt.Sprintf("g%02d", g)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g, in := range insts {
		wg.Go(func() {
			for i := range perG {
				in.Boot = int64(i + 1)
				in.Config["volatile.i"] = fmt.Sprint(i)
				var err error
				switch i % 3 {
				case 0:
					err = s.UpdateInstanceWithTimeline(ctx, in, &record.TimelineEntry{Boot: in.Boot, Kind: "state", To: "running", Detail: fmt.Sprint(i)})
				case 1:
					err = s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: in.ID, Boot: in.Boot, Kind: "agent", To: "started", Detail: fmt.Sprint(i)})
				case 2:
					err = s.AppendEvent(ctx, &events.Record{Type: "lifecycle", Instance: in.Name, Body: []byte("{}")})
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantTimeline := 0
	wantEvents := 0
	for i := range perG {
		switch i % 3 {
		case 0, 1:
			wantTimeline++
		case 2:
			wantEvents++
		}
	}
	for _, in := range insts {
		entries, err := s.ListTimeline(ctx, in.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != wantTimeline {
			t.Errorf("%s: %d timeline entries, want %d", in.Name, len(entries), wantTimeline)
		}
		got, err := s.GetInstance(ctx, in.Name)
		if err != nil {
			t.Fatal(err)
		}
		// The last UpdateInstanceWithTimeline call was at i = the largest
		// multiple of 3 below perG.
		lastUpdate := ((perG - 1) / 3) * 3
		if got.Config["volatile.i"] != fmt.Sprint(lastUpdate) {
			t.Errorf("%s: volatile.i = %q, want %d", in.Name, got.Config["volatile.i"], lastUpdate)
		}
	}
	evs, err := s.EventsAfter(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != goroutines*wantEvents {
		t.Errorf("%d events, want %d", len(evs), goroutines*wantEvents)
	}
}

// testGroupCommitFailure mixes calls that must fail (timeline of a missing
// instance, duplicate names) with good ones; only the bad ones may fail.
func testGroupCommitFailure(t *testing.T, s db.Store) {
	ctx := testContext(t)
	in := mustCreate(ctx, t, s, newInstance("ok"))
	const rounds = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	var good []*record.TimelineEntry
	type result struct {
		name    string
		err     error
		wantErr error
	}
	results := make(chan result, rounds*3)
	start := make(chan struct{})
	for i := range rounds {
		wg.Go(func() {
			<-start
			e := &record.TimelineEntry{InstanceID: in.ID, Kind: "state", To: "running", Detail: fmt.Sprint(i)}
			err := s.AppendTimeline(ctx, e)
			if err == nil {
				mu.Lock()
				good = append(good, e)
				mu.Unlock()
			}
			results <- result{"good append", err, nil}
		})
		wg.Go(func() {
			<-start
			err := s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: in.ID + 1000, Kind: "state", To: "running"})
			results <- result{"orphan append", err, db.ErrNotFound}
		})
		wg.Go(func() {
			<-start
			err := s.CreateInstance(ctx, newInstance("ok"))
			results <- result{"duplicate create", err, db.ErrAlreadyExists}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		switch {
		case r.wantErr == nil && r.err != nil:
			t.Errorf("%s failed: %v", r.name, r.err)
		case r.wantErr != nil && !errors.Is(r.err, r.wantErr):
			t.Errorf("%s = %v, want %v", r.name, r.err, r.wantErr)
		}
	}
	entries, err := s.ListTimeline(ctx, in.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != rounds || len(good) != rounds {
		t.Errorf("%d entries stored, %d acknowledged; want %d", len(entries), len(good), rounds)
	}
	stored := map[int64]bool{}
	for _, e := range entries {
		stored[e.ID] = true
	}
	for _, e := range good {
		if !stored[e.ID] {
			t.Errorf("acknowledged entry %d (detail %s) not stored under its id", e.ID, e.Detail)
		}
	}
}

func testClosed(t *testing.T, s db.Store) {
	ctx := testContext(t)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"CreateInstance", func() error { return s.CreateInstance(ctx, newInstance("late")) }},
		{"GetInstance", func() error { _, err := s.GetInstance(ctx, "late"); return err }},
		{"AppendEvent", func() error { return s.AppendEvent(ctx, &events.Record{Type: "lifecycle"}) }},
		{"LastEventID", func() error { _, err := s.LastEventID(ctx); return err }},
		{"Close again", func() error {
			if err := s.Close(); err != nil {
				return err
			}
			return db.ErrClosed
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, db.ErrClosed) {
				t.Fatalf("%s after Close = %v, want ErrClosed", tc.name, err)
			}
		})
	}
}
