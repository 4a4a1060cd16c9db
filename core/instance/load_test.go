package instance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
)

// TestListDoesNotBlockWriters: a listing that takes long (a slow client, a
// flood of lists) works on a snapshot and holds no lock, so state changes
// go on meanwhile; the listing sees the instances as they were.
func TestListDoesNotBlockWriters(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"a1", "b1", "c1"} {
		e.create(n, nil)
	}
	listing, release, listed := make(chan struct{}), make(chan struct{}), make(chan []string, 1)
	go func() {
		var seen []string
		first := true
		err := e.m.ListFunc(context.Background(), ListFilter{}, func(v *Instance) error {
			if first {
				first = false
				close(listing)
				<-release
			}
			seen = append(seen, v.Name+"="+v.Config["user.x"])
			return nil
		})
		if err != nil {
			t.Errorf("ListFunc: %v", err)
		}
		listed <- seen
	}()
	<-listing
	done := make(chan error, 1)
	go func() {
		_, err := e.m.UpdateConfig(context.Background(), "c1", map[string]string{"user.x": "1"}, nil, adminCaller)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("UpdateConfig: %v", err)
		}
	case <-time.After(time.Minute):
		close(release)
		t.Fatal("UpdateConfig waited for a listing in progress")
	}
	close(release)
	if got, want := strings.Join(<-listed, ","), "a1=,b1=,c1="; got != want {
		t.Fatalf("listing saw %s, want the snapshot %s", got, want)
	}
	if v := e.get("c1"); v.Config["user.x"] != "1" {
		t.Fatalf("c1 config %v", v.Config)
	}
}

// flakyStore fails timeline and event writes while told to.
type flakyStore struct {
	db.Store
	mu           sync.Mutex
	failTimeline int // AppendTimeline calls left to fail; -1 = all
	failUpdate   int // UpdateInstanceWithTimeline calls left to fail
	failEvents   int // AppendEvent calls left to fail
	calls        int // AppendTimeline calls
}

var errFlaky = errors.New("database is locked (injected)")

func take(n *int) bool {
	switch {
	case *n < 0:
		return true
	case *n > 0:
		*n--
		return true
	}
	return false
}

func (s *flakyStore) AppendTimeline(ctx context.Context, entries ...*record.TimelineEntry) error {
	s.mu.Lock()
	s.calls++
	fail := take(&s.failTimeline)
	s.mu.Unlock()
	if fail {
		return errFlaky
	}
	return s.Store.AppendTimeline(ctx, entries...)
}

func (s *flakyStore) UpdateInstanceWithTimeline(ctx context.Context, in *record.Instance, entries ...*record.TimelineEntry) error {
	s.mu.Lock()
	fail := take(&s.failUpdate)
	s.mu.Unlock()
	if fail {
		return errFlaky
	}
	return s.Store.UpdateInstanceWithTimeline(ctx, in, entries...)
}

func (s *flakyStore) AppendEvent(ctx context.Context, ev *events.Record) error {
	s.mu.Lock()
	fail := take(&s.failEvents)
	s.mu.Unlock()
	if fail {
		return errFlaky
	}
	return s.Store.AppendEvent(ctx, ev)
}

func (s *flakyStore) set(f func(s *flakyStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// fastRetry keeps the tests' retries short.
var fastRetry = writeRetry{initial: time.Millisecond, max: 5 * time.Millisecond, elapsed: 100 * time.Millisecond, attempt: 5 * time.Second}

// flakyEnv is an env whose manager and bus write through a flakyStore.
func flakyEnv(t *testing.T) (*env, *flakyStore) {
	e := newEnv(t)
	fs := &flakyStore{Store: e.store}
	e.bus = events.New(fs, events.WithWriteRetry(events.WriteRetry{Initial: time.Millisecond, Max: 5 * time.Millisecond, Elapsed: 100 * time.Millisecond}))
	t.Cleanup(func() { _ = e.bus.Close() })
	m, err := NewManager(Config{Store: fs, Backends: fakeBackends{"fake": e.be}, Bus: e.bus, Hooks: e.hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	m.retry = fastRetry
	e.m = m
	return e, fs
}

func details(t *testing.T, e *env, name string) []string {
	t.Helper()
	tl, err := e.m.Timeline(context.Background(), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range tl {
		out = append(out, x.Kind+": "+x.Detail)
	}
	return out
}

func TestTimelineWritesRetried(t *testing.T) {
	tests := []struct {
		name      string
		fail      func(s *flakyStore)
		wantLost  int      // LostTimelineEntries after create
		wantAfter []string // kind: detail of the timeline after create and start
		wantStart bool     // Start succeeds
	}{
		{"transient timeline failure", func(s *flakyStore) { s.failTimeline = 3 }, 0,
			[]string{"state: created", "state: "}, true},
		{"timeline entry lost, then reported", func(s *flakyStore) { s.failTimeline = -1 }, 1,
			[]string{"timeline: timeline incomplete: 1 entries lost", "state: "}, true},
		{"transient state change failure", func(s *flakyStore) { s.failUpdate = 2 }, 0,
			[]string{"state: created", "state: "}, true},
		{"transient event log failure", func(s *flakyStore) { s.failEvents = 2 }, 0,
			[]string{"state: created", "state: "}, true},
		{"event lost", func(s *flakyStore) { s.failEvents = -1 }, 0,
			[]string{"state: created", "timeline: event instance-created lost: publishing lifecycle event: appending to the event log"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, fs := flakyEnv(t)
			fs.set(tt.fail)
			e.create("vm1", nil)
			if n, err := e.m.LostTimelineEntries(context.Background(), "vm1"); err != nil || n != tt.wantLost {
				t.Fatalf("LostTimelineEntries = %d, %v; want %d", n, err, tt.wantLost)
			}
			fs.set(func(s *flakyStore) {
				if s.failTimeline < 0 {
					s.failTimeline = 0 // healed
				}
			})
			if tt.wantStart {
				if err := e.m.Start(context.Background(), "vm1", adminCaller); err != nil {
					t.Fatalf("Start: %v", err)
				}
				if n, _ := e.m.LostTimelineEntries(context.Background(), "vm1"); n != 0 {
					t.Fatalf("%d entries still unreported after a successful write", n)
				}
			}
			if acts := e.actions("vm1"); tt.wantStart && (len(acts) == 0 || acts[0] != events.InstanceCreated) {
				t.Fatalf("events %v, want instance-created first", acts)
			}
			got := details(t, e, "vm1")
			if len(got) < len(tt.wantAfter) {
				t.Fatalf("timeline %q, want it to start with %q", got, tt.wantAfter)
			}
			for i, w := range tt.wantAfter {
				if !strings.HasPrefix(got[i], w) {
					t.Fatalf("timeline %q, entry %d: want %q", got, i, w)
				}
			}
		})
	}
}
