package events

import (
	"context"
	"encoding/json"
	"testing"
)

// sparseStore is an event log whose ids have large gaps, as retention
// leaves them after pruning a noisy instance; it counts the reads.
type sparseStore struct {
	EventStore           // only LastEventID and EventsAfter are used
	events     []*Record // by id, ascending
	reads      int
	rows       int
}

func (s *sparseStore) LastEventID(context.Context) (int64, error) {
	return s.events[len(s.events)-1].ID, nil
}

func (s *sparseStore) EventsAfter(_ context.Context, after int64, limit int) ([]*Record, error) {
	s.reads++
	var out []*Record
	for _, ev := range s.events {
		if ev.ID > after && (limit <= 0 || len(out) < limit) {
			out = append(out, ev)
		}
	}
	s.rows += len(out)
	return out, nil
}

// TestRecentSparseLog checks that Recent finds the few events left far
// below the newest id (a quiet instance's history under ten million ids of
// a pruned noisy one) in a few reads rather than one per window of 4n ids.
func TestRecentSparseLog(t *testing.T) {
	body := func(typ string) []byte {
		b, _ := json.Marshal(wireBody{Type: typ, Metadata: json.RawMessage(`{}`)})
		return b
	}
	st := &sparseStore{}
	for id := int64(1); id <= 3; id++ {
		st.events = append(st.events, &Record{ID: id, Type: TypeLifecycle, Instance: "quiet", Body: body(TypeLifecycle)})
	}
	for id := int64(10_000_000); id < 10_000_010; id++ {
		st.events = append(st.events, &Record{ID: id, Type: TypeLogging, Instance: "noisy", Body: body(TypeLogging)})
	}
	bus := New(st)
	got, err := bus.Recent(context.Background(), TypeLifecycle, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != 1 || got[2].ID != 3 {
		t.Fatalf("Recent = %d events, want the quiet instance's 3", len(got))
	}
	// Doubling from 20 ids to maxRecentWindow, then 10M/16384 windows, a
	// one-row probe each, and the full reads of the two non-empty windows.
	if most := 2 * (10_000_000/maxRecentWindow + 20); st.reads > most {
		t.Errorf("%d reads of the log, want at most %d", st.reads, most)
	}
	if most := st.reads + 2*len(st.events); st.rows > most {
		t.Errorf("%d rows read, want at most %d (a probe row per read, each event at most twice)", st.rows, most)
	}
	t.Logf("%d reads, %d rows", st.reads, st.rows)
}
