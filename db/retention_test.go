package db_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestRetention checks on both engines that the Store keeps only the newest
// timeline entries of each instance and the newest events, whether they are
// appended one by one, several per call or with an instance update, and
// leaves an instance under its limit alone.
func TestRetention(t *testing.T) {
	const (
		keepTimeline = 5  // slack 1: pruned after every append past it
		keepEvents   = 20 // slack 2
		appends      = 60
	)
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t), db.WithRetention(keepTimeline, keepEvents),
				db.WithInstanceEventFloor(1)) // the global limit alone (TestRetentionFloor checks the floor)
			busy, quiet := newInstance("busy"), newInstance("quiet")
			for _, in := range []*db.Instance{busy, quiet} {
				if err := s.CreateInstance(ctx, in); err != nil {
					t.Fatal(err)
				}
			}
			base := time.Now().UTC().Add(-time.Hour)
			var entries []*record.TimelineEntry
			entry := func(i int) *record.TimelineEntry {
				e := &record.TimelineEntry{InstanceID: busy.ID, Time: base.Add(time.Duration(i) * time.Second), Kind: "ready", To: fmt.Sprint(i), Cause: "devlxd"}
				entries = append(entries, e)
				return e
			}
			var lastEvent int64
			for i := 0; i < appends; i++ {
				var err error
				switch i % 3 {
				case 0:
					err = s.AppendTimeline(ctx, entry(i))
				case 1:
					err = s.UpdateInstanceWithTimeline(ctx, busy, entry(i))
				case 2:
					err = s.AppendTimeline(ctx, entry(i), entry(i+appends))
				}
				if err != nil {
					t.Fatal(err)
				}
				ev := &events.Record{Type: "instance-ready", Instance: busy.Name, Body: []byte(fmt.Sprint(i))}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				lastEvent = ev.ID
			}
			if err := s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: quiet.ID, Time: base, Kind: "state", To: "running", Cause: "api"}); err != nil {
				t.Fatal(err)
			}
			// The writer prunes after a batch commits, before the next one:
			// once this write returned, every prune due before it is done.
			if err := s.UpdateInstance(ctx, quiet); err != nil {
				t.Fatal(err)
			}

			got, err := s.ListTimeline(ctx, busy.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != keepTimeline {
				t.Fatalf("busy instance keeps %d timeline entries, want %d", len(got), keepTimeline)
			}
			want, err := s.ListTimeline(ctx, busy.ID, keepTimeline)
			if err != nil {
				t.Fatal(err)
			}
			// The newest by time: entries i+appends sort after all others.
			for i, e := range got {
				if e.ID != want[i].ID || e.To != fmt.Sprint(2*appends-1-3*(keepTimeline-1-i)) {
					t.Fatalf("kept entry %d is %q (id %d), want the newest ones", i, e.To, e.ID)
				}
			}
			if q, err := s.ListTimeline(ctx, quiet.ID, 0); err != nil || len(q) != 1 {
				t.Fatalf("quiet instance's timeline: %d entries, %v; want its one entry", len(q), err)
			}

			evs, err := s.EventsAfter(ctx, 0, 10*appends)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(evs); n < keepEvents || n > keepEvents+2 {
				t.Fatalf("%d events kept, want %d to %d", n, keepEvents, keepEvents+2)
			}
			if last := evs[len(evs)-1]; last.ID != lastEvent || string(last.Body) != fmt.Sprint(appends-1) {
				t.Fatalf("newest event kept is %d %q, want %d", last.ID, last.Body, lastEvent)
			}
			if id, err := s.LastEventID(ctx); err != nil || id != lastEvent {
				t.Fatalf("LastEventID = %d, %v; want %d", id, err, lastEvent)
			}
		})
	}
}
