package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// waitTimeout bounds every wait for an event; generous for a loaded machine.
const waitTimeout = 30 * time.Second

// jitterStore is an in-memory EventStore that gives ids in commit order but
// returns from AppendEvent after a random delay, as a group-commit writer
// waking its callers does: appends return out of id order.
type jitterStore struct {
	mu     sync.Mutex
	events []*Record
	jitter time.Duration
}

func (s *jitterStore) AppendEvent(ctx context.Context, ev *Record) error {
	s.mu.Lock()
	cp := *ev
	cp.ID = int64(len(s.events)) + 1
	s.events = append(s.events, &cp)
	ev.ID = cp.ID
	s.mu.Unlock()
	if s.jitter > 0 {
		// The behaviour under test: a store whose commits take a random
		// while, so concurrent publishers finish out of id order.
		time.Sleep(rand.N(s.jitter))
	}
	return ctx.Err()
}

func (s *jitterStore) EventsAfter(_ context.Context, after int64, limit int) ([]*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Record
	for _, ev := range s.events {
		if ev.ID > after {
			cp := *ev
			out = append(out, &cp)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

func (s *jitterStore) LastEventID(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.events)), nil
}

var _ EventStore = (*jitterStore)(nil)

// stores returns the event stores the behaviour tests run against: the real
// SQLite store and the out-of-order fake.
func stores() []struct {
	name string
	open func(t testing.TB) EventStore
} {
	return []struct {
		name string
		open func(t testing.TB) EventStore
	}{
		{"sqlite", func(t testing.TB) EventStore { return SQLiteStore(t) }},
		{"jitter", func(testing.TB) EventStore { return &jitterStore{jitter: 2 * time.Millisecond} }},
	}
}

func newBus(t testing.TB, st EventStore, opts ...Option) *Bus {
	t.Helper()
	b := New(st, opts...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func publishN(t testing.TB, b *Bus, n int, instance string) []Event {
	t.Helper()
	out := make([]Event, 0, n)
	for i := range n {
		ev, err := b.Publish(context.Background(), NewLifecycle(InstanceStarted, instance, map[string]any{"i": i}, nil))
		if err != nil {
			t.Fatalf("publishing event %d: %v", i, err)
		}
		out = append(out, ev)
	}
	return out
}

// receive reads n events from s or fails the test.
func receive(t testing.TB, s *Subscription, n int) []Event {
	t.Helper()
	out := make([]Event, 0, n)
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case ev, ok := <-s.C():
			if !ok {
				t.Fatalf("subscription closed after %d of %d events: %v", len(out), n, s.Err())
			}
			out = append(out, ev)
		case <-timer.C:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

func ids(evs []Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func TestPublishDeliversInOrder(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			b := newBus(t, st.open(t))
			sub, err := b.Subscribe(Filter{})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			sent := publishN(t, b, 20, "web1")
			got := receive(t, sub, 20)
			if !slices.Equal(ids(got), ids(sent)) {
				t.Fatalf("received ids %v, published %v", ids(got), ids(sent))
			}
			for i := 1; i < len(sent); i++ {
				if sent[i].ID <= sent[i-1].ID {
					t.Fatalf("ids not increasing: %v", ids(sent))
				}
			}
			if got[0].Instance != "web1" || got[0].Type != TypeLifecycle {
				t.Errorf("event = %+v", got[0])
			}
		})
	}
}

func TestConcurrentPublishKeepsIDOrder(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			b := newBus(t, st.open(t))
			sub, err := b.Subscribe(Filter{})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			const writers, each = 8, 25
			var wg sync.WaitGroup
			published := make(chan int64, writers*each)
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						ev, err := b.Publish(context.Background(), NewLifecycle(InstanceUpdated, fmt.Sprintf("i%d", w), map[string]any{"i": i}, nil))
						if err != nil {
							t.Errorf("publish: %v", err)
							return
						}
						published <- ev.ID
					}
				})
			}
			got := receive(t, sub, writers*each)
			wg.Wait()
			close(published)
			var want []int64
			for id := range published {
				want = append(want, id)
			}
			sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
			if !slices.Equal(ids(got), want) {
				t.Fatalf("received %v\nwant (sorted published) %v", ids(got), want)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	b := newBus(t, &jitterStore{})
	tests := []struct {
		name   string
		filter Filter
		want   []string // "type/instance" of received events
	}{
		{"all", Filter{}, []string{"lifecycle/a", "lifecycle/b", "logging/", "lifecycle/c"}},
		{"type", Filter{Types: []string{TypeLogging}}, []string{"logging/"}},
		{"instance", Filter{Instances: []string{"b"}}, []string{"lifecycle/b"}},
		{"instances", Filter{Instances: []string{"a", "c"}}, []string{"lifecycle/a", "lifecycle/c"}},
		{"type and instance", Filter{Types: []string{TypeLifecycle}, Instances: []string{"a", ""}}, []string{"lifecycle/a"}},
		{"nothing", Filter{Types: []string{"nope"}}, nil},
	}
	subs := make([]*Subscription, len(tests))
	for i, tt := range tests {
		s, err := b.Subscribe(tt.filter)
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	for _, ev := range []Event{
		NewLifecycle(InstanceStarted, "a", nil, nil),
		NewLifecycle(InstanceStarted, "b", nil, nil),
		{Type: TypeLogging, Metadata: json.RawMessage(`{"message":"hi"}`)},
		NewLifecycle(InstanceStarted, "c", nil, nil),
	} {
		if _, err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := subs[i]
			_ = s.Close()
			var got []string
			for ev := range s.C() {
				got = append(got, ev.Type+"/"+ev.Instance)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if err := s.Err(); err != nil {
				t.Errorf("Err() after Close = %v", err)
			}
		})
	}
}

func TestCloseAndErrors(t *testing.T) {
	st := &jitterStore{}
	b := New(st)
	live, err := b.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, b, 3, "x")
	replaying, err := b.Subscribe(Filter{After: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(Filter{After: -1}); err == nil {
		t.Error("Subscribe with a negative After succeeded")
	}
	if _, err := b.Publish(context.Background(), Event{}); err == nil {
		t.Error("Publish without a type succeeded")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Subscription{live, replaying} {
		for range s.C() {
		}
		if !errors.Is(s.Err(), ErrClosed) {
			t.Errorf("Err() = %v, want ErrClosed", s.Err())
		}
		_ = s.Close()
	}
	if _, err := b.Publish(context.Background(), NewLifecycle(InstanceStarted, "x", nil, nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe(Filter{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPublishStoreFailure(t *testing.T) {
	b := newBus(t, &jitterStore{})
	sub, err := b.Subscribe(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Publish(ctx, NewLifecycle(InstanceStarted, "x", nil, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with a cancelled context: %v", err)
	}
	// A failed append must not stall later deliveries.
	sent := publishN(t, b, 1, "x")
	got := receive(t, sub, 1)
	if got[0].ID != sent[0].ID {
		t.Fatalf("got id %d, want %d", got[0].ID, sent[0].ID)
	}
}

func TestNewLifecycleShape(t *testing.T) {
	before := time.Now()
	ev := NewLifecycle(InstanceReady, "web1", nil, &Requestor{Protocol: "devlxd"})
	if ev.Timestamp.Location() != time.UTC || ev.Timestamp.Before(before.Add(-time.Second)) {
		t.Errorf("timestamp %v is not now in UTC", ev.Timestamp)
	}
	ev.Timestamp = time.Date(2026, 11, 22, 0, 0, 0, 123456789, time.UTC)
	rec, err := New(nil).record(&ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"lifecycle","timestamp":"2026-11-22T00:00:00.123456789Z","project":"default","location":"none",` +
		`"metadata":{"action":"instance-ready","source":"/1.0/instances/web1","context":{},"requestor":{"username":"","protocol":"devlxd","address":""}}}`
	if string(rec.Body) != want {
		t.Errorf("stored event JSON\n got %s\nwant %s", rec.Body, want)
	}
	l, err := ev.Lifecycle()
	if err != nil || l.Action != InstanceReady || l.Requestor.Protocol != "devlxd" {
		t.Errorf("Lifecycle() = %+v, %v", l, err)
	}
	bad := NewLifecycle(InstanceError, "x", map[string]any{"f": func() {}}, nil)
	if l, err := bad.Lifecycle(); err != nil || l.Context["error"] == nil {
		t.Errorf("unencodable context: %+v, %v", l, err)
	}
}

// BenchmarkPublishLatency measures publish -> receive latency on the real
// SQLite store with a few concurrent publishers (as agent monitors of
// several instances are), reporting median and p99.
func BenchmarkPublishLatency(b *testing.B) {
	for _, publishers := range []int{1, 8} {
		b.Run(fmt.Sprintf("publishers=%d", publishers), func(b *testing.B) {
			bus := newBus(b, SQLiteStore(b), WithBuffer(1<<16))
			sub, err := bus.Subscribe(Filter{})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Close()
			lat := make([]time.Duration, 0, b.N)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range b.N {
					ev, ok := <-sub.C()
					if !ok {
						return
					}
					lat = append(lat, time.Since(ev.Timestamp))
				}
			}()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + publishers - 1) / publishers
			for p := range publishers {
				n := min(per, b.N-p*per)
				wg.Go(func() {
					for range n {
						ev := NewLifecycle(InstanceAgentConnected, "bench", nil, nil)
						ev.Timestamp = time.Now()
						if _, err := bus.Publish(context.Background(), ev); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			<-done
			b.StopTimer()
			if len(lat) != b.N {
				b.Fatalf("received %d of %d events: %v", len(lat), b.N, sub.Err())
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
