package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

func TestResumeWhilePublishing(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			b := newBus(t, st.open(t))
			before := publishN(t, b, 700, "web1") // more than one replay page
			after := before[99].ID

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var mu sync.Mutex
			var live []int64
			enough := make(chan struct{}) // closed at the 21st live event
			for w := range 4 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						ev, err := b.Publish(context.Background(), NewLifecycle(InstanceUpdated, fmt.Sprintf("w%d", w), nil, nil))
						if err != nil {
							t.Errorf("publish: %v", err)
							return
						}
						mu.Lock()
						live = append(live, ev.ID)
						if len(live) == 21 {
							close(enough)
						}
						mu.Unlock()
					}
				})
			}
			// Let the writers run before and during the replay.
			select {
			case <-enough:
			case <-time.After(waitTimeout):
				t.Fatal("the writers published nothing")
			}
			sub, err := b.Subscribe(Filter{After: after})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			got := receive(t, sub, 700)
			cancel()
			wg.Wait()
			mu.Lock()
			last := slices.Max(live)
			mu.Unlock()
			got = append(got, receive(t, sub, int(last-got[len(got)-1].ID))...)
			for i, ev := range got {
				if want := after + 1 + int64(i); ev.ID != want {
					t.Fatalf("event %d has id %d, want %d (gap or duplicate): %v", i, ev.ID, want, ids(got[max(0, i-30):min(len(got), i+5)]))
				}
			}
			if got[len(got)-1].ID != last {
				t.Fatalf("last id %d, want %d", got[len(got)-1].ID, last)
			}
			// The replayed events decode to what was published.
			if got[0].Instance != "web1" || !got[0].Timestamp.Equal(before[100].Timestamp) || string(got[0].Metadata) != string(before[100].Metadata) {
				t.Errorf("replayed %+v\npublished %+v", got[0], before[100])
			}
		})
	}
}

func TestResumeFiltered(t *testing.T) {
	b := newBus(t, SQLiteStore(t))
	var evs []Event
	for i := range 10 {
		ev, err := b.Publish(context.Background(), NewLifecycle(InstanceStarted, fmt.Sprintf("i%d", i%2), nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	sub, err := b.Subscribe(Filter{Instances: []string{"i1"}, After: evs[2].ID})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := receive(t, sub, 3)
	want := []int64{evs[3].ID, evs[5].ID, evs[7].ID}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("got %v, want %v", ids(got), want)
	}
}

// TestReplayFromStart checks that Replay with After 0 replays the stored log
// from its first event (monitor --since 0), and that After 0 alone does not.
func TestReplayFromStart(t *testing.T) {
	tests := []struct {
		name   string
		filter Filter
		want   []int64 // ids received before the live event
	}{
		{"replay from the start", Filter{Replay: true}, []int64{1, 2, 3}},
		{"replay after 2", Filter{After: 2, Replay: true}, []int64{3}},
		{"live only", Filter{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBus(t, SQLiteStore(t))
			publishN(t, b, 3, "i1")
			sub, err := b.Subscribe(tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			live := publishN(t, b, 1, "i1")
			got := ids(receive(t, sub, len(tt.want)+1))
			want := append(slices.Clone(tt.want), live[0].ID)
			if !slices.Equal(got, want) {
				t.Fatalf("got ids %v, want %v", got, want)
			}
		})
	}
}

func TestOverflowClosesAndResumeLosesNothing(t *testing.T) {
	b := newBus(t, SQLiteStore(t), WithBuffer(4))
	sub, err := b.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sent := publishN(t, b, 10, "web1") // never blocks although nobody reads
	var got []Event
	for ev := range sub.C() {
		got = append(got, ev)
	}
	if !errors.Is(sub.Err(), ErrOverflow) {
		t.Fatalf("Err() = %v, want ErrOverflow", sub.Err())
	}
	if len(got) != 4 {
		t.Fatalf("received %d events before the overflow, want 4", len(got))
	}
	resumed, err := b.Subscribe(Filter{After: got[len(got)-1].ID})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	got = append(got, receive(t, resumed, 6)...)
	if !slices.Equal(ids(got), ids(sent)) {
		t.Fatalf("got %v, want %v", ids(got), ids(sent))
	}
	_ = sub.Close() // closing an overflowed subscription is harmless
}

func TestOverflowWhileReplaying(t *testing.T) {
	b := newBus(t, SQLiteStore(t), WithBuffer(1), WithBacklog(2))
	sent := publishN(t, b, 10, "web1")
	sub, err := b.Subscribe(Filter{After: sent[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, b, 3, "web1") // the backlog holds 2: the third overflows
	var got []Event
	for ev := range sub.C() {
		got = append(got, ev)
	}
	if !errors.Is(sub.Err(), ErrOverflow) {
		t.Fatalf("Err() = %v, want ErrOverflow", sub.Err())
	}
	for i, ev := range got {
		if ev.ID != sent[i+1].ID {
			t.Fatalf("event %d id %d, want %d", i, ev.ID, sent[i+1].ID)
		}
	}
}

// TestSubscriptionBuffer: Filter.Buffer sizes one subscription's queue
// apart from the bus's (WithBuffer); a negative one is refused.
func TestSubscriptionBuffer(t *testing.T) {
	b := newBus(t, SQLiteStore(t), WithBuffer(4))
	tests := []struct {
		name     string
		buffer   int
		wantOver bool
	}{
		{"the bus's buffer overflows", 0, true},
		{"a larger buffer of its own holds the burst", 16, false},
		{"a smaller buffer of its own overflows", 2, true},
	}
	subs := make([]*Subscription, len(tests))
	for i, tc := range tests {
		sub, err := b.Subscribe(Filter{Buffer: tc.buffer})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[i] = sub
	}
	publishN(t, b, 10, "web1") // nobody reads meanwhile
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub := subs[i]
			if tc.wantOver {
				for range sub.C() {
				}
				if !errors.Is(sub.Err(), ErrOverflow) {
					t.Fatalf("Err() = %v, want ErrOverflow", sub.Err())
				}
				return
			}
			if got := receive(t, sub, 10); len(got) != 10 {
				t.Fatalf("received %d events, want 10", len(got))
			}
			if err := sub.Err(); err != nil {
				t.Fatalf("Err() = %v, want none", err)
			}
		})
	}
	if _, err := b.Subscribe(Filter{Buffer: -1}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Subscribe with buffer -1: %v, want ErrInvalid", err)
	}
}
