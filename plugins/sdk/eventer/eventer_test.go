package eventer

import (
	"context"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

type countLogger struct {
	mu sync.Mutex
	n  int
}

func (l *countLogger) Warn(string, ...any) { l.mu.Lock(); l.n++; l.mu.Unlock() }

// TestDropPolicy checks the documented policy on a stream whose consumer
// does not read: hints coalesce per guest and kind, lifecycle events do
// not, and a full queue drops new events with one warning per episode.
func TestDropPolicy(t *testing.T) {
	ev := func(uuid string, k sdk.EventKind) sdk.Event { return sdk.Event{UUID: uuid, Kind: k} }
	tests := []struct {
		name    string
		limit   int
		emit    []sdk.Event
		want    []sdk.Event
		dropped uint64
		warns   int
	}{
		{"hints coalesce per guest and kind", 10,
			[]sdk.Event{ev("a", sdk.EventRingData), ev("a", sdk.EventRingData), ev("b", sdk.EventRingData), ev("a", sdk.EventPortOpened), ev("a", sdk.EventPortOpened), ev("a", sdk.EventPortClosed)},
			[]sdk.Event{ev("a", sdk.EventRingData), ev("b", sdk.EventRingData), ev("a", sdk.EventPortOpened), ev("a", sdk.EventPortClosed)}, 2, 0},
		{"lifecycle events never coalesce", 10,
			[]sdk.Event{ev("a", sdk.EventReset), ev("a", sdk.EventReset), ev("a", sdk.EventExited), ev("a", sdk.EventError), ev("a", sdk.EventError)},
			[]sdk.Event{ev("a", sdk.EventReset), ev("a", sdk.EventReset), ev("a", sdk.EventExited), ev("a", sdk.EventError), ev("a", sdk.EventError)}, 0, 0},
		{"full queue drops new lifecycle events, one warning; hints still go", 2,
			[]sdk.Event{ev("a", sdk.EventReset), ev("a", sdk.EventExited), ev("b", sdk.EventExited), ev("c", sdk.EventRingData), ev("d", sdk.EventError)},
			[]sdk.Event{ev("a", sdk.EventReset), ev("a", sdk.EventExited), ev("c", sdk.EventRingData)}, 2, 1},
		{"more guests with news than the limit: every hint queued", 2,
			[]sdk.Event{ev("a", sdk.EventRingData), ev("b", sdk.EventRingData), ev("c", sdk.EventRingData), ev("c", sdk.EventPortOpened), ev("a", sdk.EventReset)},
			[]sdk.Event{ev("a", sdk.EventRingData), ev("b", sdk.EventRingData), ev("c", sdk.EventRingData), ev("c", sdk.EventPortOpened), ev("a", sdk.EventReset)}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &countLogger{}
			e := New(log)
			s := &stream{q: NewQueue[sdk.Event]()}
			s.q.limit = tc.limit
			e.streams[s] = struct{}{}
			for _, v := range tc.emit {
				e.Emit(v)
			}
			st := e.Stats()
			if len(st) != 1 || st[0].Dropped != tc.dropped || log.n != tc.warns {
				t.Fatalf("stats %+v, %d warnings; want %d dropped, %d warnings", st, log.n, tc.dropped, tc.warns)
			}
			s.q.Close()
			var got []sdk.Event
			for {
				v, ok := s.q.Pop(context.Background())
				if !ok {
					break
				}
				got = append(got, v)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].UUID != tc.want[i].UUID || got[i].Kind != tc.want[i].Kind {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestStream checks that a stream delivers emitted events in order and is
// closed, and forgotten, when its context ends.
func TestStream(t *testing.T) {
	e := New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.Emit(sdk.Event{UUID: "a", Kind: sdk.EventReset})
	e.Emit(sdk.Event{UUID: "a", Kind: sdk.EventExited})
	for _, want := range []sdk.EventKind{sdk.EventReset, sdk.EventExited} {
		if got := <-ch; got.Kind != want {
			t.Fatalf("got %v, want %v", got.Kind, want)
		}
	}
	cancel()
	for range ch {
	}
	if n := len(e.Stats()); n != 0 {
		t.Fatalf("%d streams open after the context ended", n)
	}
}
