package db_test

import (
	"fmt"
	"testing"

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
				ev := &db.Event{Type: "lifecycle", Instance: "quiet", Body: []byte(fmt.Sprint(i))}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				quietIDs = append(quietIDs, ev.ID)
			}
			var last int64
			for i := range floods {
				ev := &db.Event{Type: "lifecycle", Instance: "noisy", Body: []byte(fmt.Sprint(i))}
				if err := s.AppendEvent(ctx, ev); err != nil {
					t.Fatal(err)
				}
				last = ev.ID
			}
			// Daemon events (no instance) are kept by the global limit only.
			if err := s.AppendEvent(ctx, &db.Event{Type: "logging", Body: []byte("x")}); err != nil {
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
