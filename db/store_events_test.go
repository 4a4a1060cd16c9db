package db_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
)

func testEvents(t *testing.T, s db.Store) {
	ctx := testContext(t)
	if id, err := s.LastEventID(ctx); err != nil || id != 0 {
		t.Fatalf("LastEventID on empty log = %d, %v; want 0, nil", id, err)
	}
	var ids []int64
	for i := range 5 {
		ev := &events.Record{Type: "lifecycle", Instance: "web1", Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		if err := s.AppendEvent(ctx, ev); err != nil {
			t.Fatalf("AppendEvent: %v", err)
		}
		if len(ids) > 0 && ev.ID <= ids[len(ids)-1] {
			t.Fatalf("event id %d not above previous %d", ev.ID, ids[len(ids)-1])
		}
		ids = append(ids, ev.ID)
	}
	last, err := s.LastEventID(ctx)
	if err != nil || last != ids[4] {
		t.Fatalf("LastEventID = %d, %v; want %d", last, err, ids[4])
	}
	for _, tc := range []struct {
		name  string
		after int64
		limit int
		want  []int64
	}{
		{"all", 0, 0, ids},
		{"after second", ids[1], 0, ids[2:]},
		{"limited", ids[0], 2, ids[1:3]},
		{"after last", ids[4], 10, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := s.EventsAfter(ctx, tc.after, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, ev := range evs {
				got = append(got, ev.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
	evs, _ := s.EventsAfter(ctx, ids[2], 1)
	if len(evs) != 1 || string(evs[0].Body) != `{"n":3}` || evs[0].Instance != "web1" || evs[0].Type != "lifecycle" || evs[0].Time.IsZero() {
		t.Errorf("event after %d = %+v", ids[2], evs)
	}
}

// testEventIDsConcurrent appends events from many goroutines while a reader
// follows the log the way a resuming subscriber does; the reader must see
// ids strictly increasing with no id it missed appearing later.
func testEventIDsConcurrent(t *testing.T, s db.Store) {
	ctx := testContext(t)
	const writers, perWriter = 16, 40
	done := make(chan struct{})
	readerErr := make(chan error, 1)
	seenCount := 0
	go func() {
		var seen int64
		check := func() error {
			last, err := s.LastEventID(ctx)
			if err != nil {
				return err
			}
			evs, err := s.EventsAfter(ctx, seen, 0)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if ev.ID != seen+1 {
					return fmt.Errorf("after id %d the reader got id %d", seen, ev.ID)
				}
				seen = ev.ID
				seenCount++
			}
			if seen < last {
				return fmt.Errorf("LastEventID said %d but EventsAfter stopped at %d", last, seen)
			}
			return nil
		}
		for {
			select {
			case <-done:
				readerErr <- check()
				return
			default:
			}
			if err := check(); err != nil {
				readerErr <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			prev := int64(0)
			for i := range perWriter {
				ev := &events.Record{Type: "lifecycle", Instance: fmt.Sprintf("w%d", w), Body: fmt.Appendf(nil, `{"i":%d}`, i)}
				if err := s.AppendEvent(ctx, ev); err != nil {
					errs <- err
					return
				}
				if ev.ID <= prev {
					errs <- fmt.Errorf("writer %d: id %d after %d", w, ev.ID, prev)
				}
				prev = ev.ID
			}
		})
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	if seenCount != writers*perWriter {
		t.Errorf("reader saw %d events, want %d", seenCount, writers*perWriter)
	}
}
