package db_test

import (
	"fmt"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestRetentionIsolation is the attack of one guest making far more events
// than its share to push the other instances' history out of the log: on
// both engines, the noisy instance keeps at most its per-instance limit
// (plus the slack before a prune), its newest events among them, and the
// quiet instance's history, written before the flood, is intact.
func TestRetentionIsolation(t *testing.T) {
	const (
		perInstance = 50    // slack 5
		global      = 10000 // not reached
		floods      = 1000
		quietEvents = 7
	)
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t), db.WithRetention(0, global), db.WithInstanceEventRetention(perInstance))
			var quietIDs []int64
			for i := range quietEvents {
				ev := &events.Record{Type: "lifecycle", Instance: "quiet", Body: []byte(fmt.Sprint(i))}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				quietIDs = append(quietIDs, ev.ID)
			}
			var last int64
			for i := range floods {
				ev := &events.Record{Type: "lifecycle", Instance: "noisy", Body: []byte(fmt.Sprint(i))}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				last = ev.ID
			}
			// Daemon events (no instance) are kept by the global limit only.
			if err := s.AppendEvent(ctx, &events.Record{Type: "logging", Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			all, err := s.EventsAfter(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var quiet []int64
			noisy, newestNoisy := 0, int64(0)
			for _, ev := range all {
				switch ev.Instance {
				case "quiet":
					quiet = append(quiet, ev.ID)
				case "noisy":
					noisy++
					newestNoisy = max(newestNoisy, ev.ID)
				}
			}
			if fmt.Sprint(quiet) != fmt.Sprint(quietIDs) {
				t.Errorf("quiet instance's events %v, want all of %v", quiet, quietIDs)
			}
			if most := perInstance + perInstance/10; noisy < perInstance || noisy > most {
				t.Errorf("noisy instance keeps %d events, want %d to %d", noisy, perInstance, most)
			}
			if newestNoisy != last {
				t.Errorf("newest noisy event kept %d, want %d", newestNoisy, last)
			}
		})
	}
}

// TestRetentionFloor is the attack of one busy guest pushing every other
// instance's history out of the global event log: with a global limit far
// below what the busy instance writes, on both engines, every other
// existing instance still has its newest floor events after the prunes
// (exactly those: the older ones went), while the events of a deleted
// instance and the daemon's own events, which have no floor, are pruned by
// the global limit like the busy instance's.
func TestRetentionFloor(t *testing.T) {
	const (
		floor  = 5
		global = 30 // slack 3
		busyN  = 600
		quietN = 12 // more than the floor: the older ones may go
		quiets = 4
	)
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t), db.WithRetention(0, global), db.WithInstanceEventFloor(floor))
			names := []string{"busy", "gone"}
			for i := range quiets {
				names = append(names, fmt.Sprintf("quiet%d", i))
			}
			insts := map[string]*db.Instance{}
			for _, n := range names {
				insts[n] = newInstance(n)
				if err := s.CreateInstance(ctx, insts[n]); err != nil {
					t.Fatal(err)
				}
			}
			appended := map[string][]int64{}
			add := func(name string) {
				t.Helper()
				ev := &events.Record{Type: "lifecycle", Instance: name, Body: []byte("{}")}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				appended[name] = append(appended[name], ev.ID)
			}
			// The quiet instances, the one deleted later and the daemon write
			// a few events among the busy one's flood, most of them early.
			for i := range busyN {
				if i%40 == 0 && i/40 < quietN {
					for _, n := range names[1:] {
						add(n)
					}
					add("")
				}
				add("busy")
			}
			if err := s.DeleteInstance(ctx, insts["gone"].ID); err != nil {
				t.Fatal(err)
			}
			// Enough appends after the delete for another global prune.
			for range global {
				add("busy")
			}
			// The writer prunes after a batch commits, before the next one.
			if err := s.UpdateInstance(ctx, insts["busy"]); err != nil {
				t.Fatal(err)
			}
			all, err := s.EventsAfter(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			kept := map[string][]int64{}
			for _, ev := range all {
				kept[ev.Instance] = append(kept[ev.Instance], ev.ID)
			}
			for _, n := range names[2:] {
				want := appended[n][len(appended[n])-floor:]
				if fmt.Sprint(kept[n]) != fmt.Sprint(want) {
					t.Errorf("instance %s keeps events %v, want its newest %d: %v", n, kept[n], floor, want)
				}
			}
			// The deleted instance's and the daemon's events were all written
			// before the last global cut: none survive it.
			if len(kept["gone"]) != 0 || len(kept[""]) != 0 {
				t.Errorf("deleted instance keeps %v, the daemon %v; want none (no floor)", kept["gone"], kept[""])
			}
			busy := appended["busy"]
			if got := kept["busy"]; len(got) < global-quiets*floor || got[len(got)-1] != busy[len(busy)-1] {
				t.Errorf("busy instance keeps %d events (newest %v), want at least %d and its newest %d", len(got), got[len(got)-1:], global-quiets*floor, busy[len(busy)-1])
			}
			if most := global + global/10 + quiets*floor; len(all) > most {
				t.Errorf("%d events kept in all, want at most %d (the global limit, its slack and the floors)", len(all), most)
			}
		})
	}
}
