package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

func TestNewManagerNeedsItsParts(t *testing.T) {
	e := newEnv(t)
	for name, cfg := range map[string]Config{
		"no store":    {Backends: fakeBackends{}, Bus: e.bus},
		"no backends": {Store: e.store, Bus: e.bus},
		"no bus":      {Store: e.store, Backends: fakeBackends{}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewManager(cfg); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("NewManager: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t)
	other := newFakeBackend("other")
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be, "other": other}, Bus: e.bus})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"web1", "web2", "db1", "db2", "cache"} {
		req := CreateRequest{Name: n, Backend: "fake"}
		if n == "cache" {
			req.Backend = "other"
		}
		inst, err := m.Create(bg, req, adminCaller)
		if err != nil {
			t.Fatal(err)
		}
		if n != "db2" {
			if err := m.Start(bg, n, adminCaller); err != nil {
				t.Fatal(err)
			}
		}
		if n == "web1" {
			if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
				t.Fatal(err)
			}
			if err := m.SetAgentState(bg, inst.UUID, AgentConnected, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		f    ListFilter
		want []string
		err  error
	}{
		{"all", ListFilter{}, []string{"cache", "db1", "db2", "web1", "web2"}, nil},
		{"running includes ready", ListFilter{Status: "Running"}, []string{"cache", "db1", "web1", "web2"}, nil},
		{"ready", ListFilter{Status: "Ready"}, []string{"web1"}, nil},
		{"stopped", ListFilter{Status: "stopped"}, []string{"db2"}, nil},
		{"error", ListFilter{Status: "Error"}, nil, nil},
		{"backend", ListFilter{Backend: "other"}, []string{"cache"}, nil},
		{"agent", ListFilter{Agent: "connected"}, []string{"web1"}, nil},
		{"no agent", ListFilter{Agent: "none"}, []string{"cache", "db1", "db2", "web2"}, nil},
		{"query", ListFilter{Query: "WEB"}, []string{"web1", "web2"}, nil},
		{"combined", ListFilter{Query: "db", Status: "Running"}, []string{"db1"}, nil},
		{"bad status", ListFilter{Status: "Sleeping"}, nil, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := m.List(bg, tt.f)
			if !errors.Is(err, tt.err) {
				t.Fatalf("List: %v, want %v", err, tt.err)
			}
			var got []string
			for _, i := range list {
				got = append(got, i.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			// ListFunc's shared views encode exactly as List's copies.
			var want, viewed []string
			for _, i := range list {
				b, _ := json.Marshal(i)
				want = append(want, string(b))
			}
			err = m.ListFunc(bg, tt.f, func(v *Instance) error {
				b, err := json.Marshal(v)
				viewed = append(viewed, string(b))
				return err
			})
			if !errors.Is(err, tt.err) {
				t.Fatalf("ListFunc: %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(want, viewed); diff != "" {
				t.Errorf("ListFunc views differ from List (-List +ListFunc):\n%s", diff)
			}
		})
	}
	stop := errors.New("stop")
	n := 0
	if err := m.ListFunc(bg, ListFilter{}, func(*Instance) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("ListFunc with fn failing: %v after %d calls, want stop after 1", err, n)
	}
}

func TestConcurrentOperations(t *testing.T) {
	e := newEnv(t)
	e.be.delay = time.Millisecond
	const n = 12
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm%d", i)
		e.create(names[i], nil)
	}
	var wg sync.WaitGroup
	for _, name := range names {
		// Two goroutines per instance race starts, stops and restarts.
		for w := range 2 {
			wg.Go(func() {
				for i := range 6 {
					var err error
					switch (i + w) % 3 {
					case 0:
						err = e.m.Start(bg, name, adminCaller)
					case 1:
						err = e.m.Stop(bg, name, StopOptions{}, adminCaller)
					case 2:
						err = e.m.Restart(bg, name, StopOptions{}, adminCaller)
					}
					if err != nil && !errors.Is(err, errdefs.ErrConflict) {
						t.Errorf("%s: %v", name, err)
					}
					_, _ = e.m.List(bg, ListFilter{Status: "Running"})
				}
			})
		}
	}
	wg.Wait()
	if o := e.be.overlap.Load(); o != 0 {
		t.Errorf("%d backend calls overlapped on one guest", o)
	}
	// Every instance's stored power state matches its guest.
	for _, name := range names {
		inst := e.get(name)
		e.be.mu.Lock()
		var running bool
		for _, g := range e.be.guests {
			if g.uuid == inst.UUID {
				running = g.running
			}
		}
		e.be.mu.Unlock()
		if status.IsRunning(status.Code(inst.StatusCode)) != running {
			t.Errorf("%s: status %s, guest running %v", name, inst.Status, running)
		}
		// The timeline alternates: every transition starts where the last ended.
		tl, err := e.m.Timeline(bg, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(tl); i++ {
			if tl[i].Kind == kindState && tl[i].From != tl[i-1].To {
				t.Errorf("%s timeline breaks at %d: %+v after %+v", name, i, tl[i], tl[i-1])
			}
		}
	}
	// Parallel deletes of all instances, twice each.
	for _, name := range names {
		for range 2 {
			wg.Go(func() {
				err := e.m.Delete(bg, name, true, adminCaller)
				if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("delete %s: %v", name, err)
				}
			})
		}
	}
	wg.Wait()
	if list, _ := e.m.List(bg, ListFilter{}); len(list) != 0 || e.be.count() != 0 {
		t.Errorf("%d instances and %d guests left", len(list), e.be.count())
	}
}

// BenchmarkList10k lists 10,000 instances (a quarter running, some Ready).
func BenchmarkList10k(b *testing.B) {
	e := newEnv(b)
	const total = 10000
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				rec := &record.Instance{Name: fmt.Sprintf("vm%05d", i), UUID: newUUID(), Backend: "fake",
					Config:     map[string]string{"user.role": "web", "limits.cpu": "2", "limits.memory": "1GiB"},
					Devices:    map[string]map[string]string{"root": {"type": "disk"}},
					PowerState: status.PowerStopped, Handle: []byte(`{"id":0}`)}
				if i%4 == 0 {
					rec.PowerState = status.PowerRunning
					if i%8 == 0 {
						rec.Config[KeyReady] = "true"
					}
				}
				if err := e.store.CreateInstance(bg, rec); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, f := range []ListFilter{{}, {Status: "Running"}, {Query: "vm0999"}} {
		b.Run(fmt.Sprintf("status=%s,q=%s", f.Status, f.Query), func(b *testing.B) {
			m := e.manager()
			if _, err := m.List(bg, f); err != nil { // loads the cache
				b.Fatal(err)
			}
			b.ResetTimer()
			var n int
			for b.Loop() {
				list, err := m.List(bg, f)
				if err != nil {
					b.Fatal(err)
				}
				n = len(list)
			}
			b.ReportMetric(float64(n), "instances")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
		b.Run(fmt.Sprintf("func/status=%s,q=%s", f.Status, f.Query), func(b *testing.B) {
			m := e.manager()
			if _, err := m.List(bg, f); err != nil { // loads the cache
				b.Fatal(err)
			}
			var n int
			for b.Loop() {
				n = 0
				if err := m.ListFunc(bg, f, func(*Instance) error { n++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "instances")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
		// rows: ListCachedFunc as the admin API calls it once every slot
		// holds the view's encoding (no view built); func above is what it
		// cost when every row's view was built.
		b.Run(fmt.Sprintf("rows/status=%s,q=%s", f.Status, f.Query), func(b *testing.B) {
			m := e.manager()
			if _, err := m.List(bg, f); err != nil { // loads the cache
				b.Fatal(err)
			}
			fill := func(rows []CachedRow) error {
				for i := range rows {
					if rows[i].Cached == nil {
						rows[i].Cache.Store(rows[i].Version, rows[i].Name)
					}
				}
				return nil
			}
			if err := m.ListCachedFunc(bg, f, fill); err != nil { // fills the slots
				b.Fatal(err)
			}
			b.ResetTimer()
			var n int
			for b.Loop() {
				n = 0
				if err := m.ListCachedFunc(bg, f, func(rows []CachedRow) error {
					for i := range rows {
						if rows[i].Cached == nil {
							b.Fatal("a slot lost its value")
						}
						n++
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "instances")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
	}
}

// BenchmarkAgentStateToEvent measures the time from SetAgentState to the
// instance-agent-* event on a bus subscription (the admin event stream),
// on the real SQLite store.
func BenchmarkAgentStateToEvent(b *testing.B) {
	e := newEnv(b)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		b.Fatal(err)
	}
	sub, err := e.bus.Subscribe(events.Filter{Instances: []string{"web1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	lat := make([]time.Duration, 0, b.N)
	states := []AgentState{AgentConnected, AgentLost}
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := e.m.SetAgentState(bg, inst.UUID, states[i%2], t0); err != nil {
			b.Fatal(err)
		}
		select {
		case <-sub.C():
			lat = append(lat, time.Since(t0))
		case <-time.After(30 * time.Second):
			b.Fatalf("no event: %v", sub.Err())
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// failingStore is the real store with instance updates failing on demand.
type failingStore struct {
	db.Store
	fail atomic.Bool
}

func (s *failingStore) UpdateInstanceWithTimeline(ctx context.Context, in *record.Instance, entries ...*record.TimelineEntry) error {
	if s.fail.Load() {
		return errors.New("disk on fire")
	}
	return s.Store.UpdateInstanceWithTimeline(ctx, in, entries...)
}

func TestStoreFailureChangesNothing(t *testing.T) {
	e := newEnv(t)
	fs := &failingStore{Store: e.store}
	m, err := NewManager(Config{Store: fs, Backends: fakeBackends{"fake": e.be}, Bus: e.bus, Hooks: e.hooks, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Create(bg, CreateRequest{Name: "web1", Start: true}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	fs.fail.Store(true)
	if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err == nil {
		t.Fatal("SetReady succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Status != "Running" || got.Ready() {
		t.Errorf("after a failed SetReady: %s", got.Status)
	}
	if n := count(e.actions("web1"), events.InstanceReady); n != 0 {
		t.Errorf("%d instance-ready events for a change that was not saved", n)
	}
	if err := m.Stop(bg, "web1", StopOptions{}, adminCaller); err == nil {
		t.Fatal("Stop succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Status == "Stopping" {
		t.Error("the failed stop left the instance Stopping")
	}
	if _, err := m.UpdateConfig(bg, "web1", map[string]string{"user.a": "b"}, nil, adminCaller); err == nil {
		t.Fatal("UpdateConfig succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Config["user.a"] != "" {
		t.Error("a config change that was not saved is visible")
	}
	fs.fail.Store(false)
	if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
}
