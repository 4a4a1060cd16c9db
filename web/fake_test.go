package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// fakeInstances is a small in-memory stand-in for the instance service: it
// filters like core/instance.Manager (Running matches Ready, agent "none"),
// records the last filter it was asked for and the actions it ran.
type fakeInstances struct {
	mu       sync.Mutex
	byName   map[string]*instance.Instance
	sorted   []string
	filter   instance.ListFilter // the last one asked for
	actions  []string            // "stop web1 force=true"
	by       []events.Requestor  // who asked for each action
	failing  map[string]error
	timeline map[string][]instance.TimelineEntry
}

var _ Instances = (*fakeInstances)(nil)

func newFakeInstances(list ...*instance.Instance) *fakeInstances {
	f := &fakeInstances{byName: map[string]*instance.Instance{}, failing: map[string]error{}, timeline: map[string][]instance.TimelineEntry{}}
	for _, i := range list {
		f.put(i)
	}
	return f
}

func (f *fakeInstances) put(i *instance.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byName[i.Name]; !ok {
		f.sorted = append(f.sorted, i.Name)
		slices.Sort(f.sorted)
	}
	f.byName[i.Name] = i
}

func (f *fakeInstances) List(_ context.Context, lf instance.ListFilter) ([]*instance.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filter = lf
	q := strings.ToLower(lf.Query)
	views := make([]instance.Instance, 0, len(f.sorted))
	for _, n := range f.sorted {
		i := f.byName[n]
		switch {
		case lf.Status != "" && i.Status != lf.Status && !(lf.Status == "Running" && i.Status == "Ready"):
			continue
		case lf.Agent == "none" && i.Agent.State != instance.AgentNone:
			continue
		case lf.Agent != "" && lf.Agent != "none" && string(i.Agent.State) != lf.Agent:
			continue
		case lf.Backend != "" && i.Backend != lf.Backend:
			continue
		case q != "" && !strings.Contains(strings.ToLower(i.Name), q):
			continue
		}
		views = append(views, *i)
	}
	out := make([]*instance.Instance, len(views))
	for k := range views {
		out[k] = &views[k]
	}
	return out, nil
}

// ListFunc calls fn with each of List's views, as the manager hands out
// its shared views: the dashboard lists through it (listRows).
func (f *fakeInstances) ListFunc(ctx context.Context, lf instance.ListFilter, fn func(*instance.Instance) error) error {
	views, err := f.List(ctx, lf)
	if err != nil {
		return err
	}
	for _, v := range views {
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeInstances) lastFilter() instance.ListFilter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.filter
}

func (f *fakeInstances) Get(_ context.Context, name string) (*instance.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	c := *i
	return &c, nil
}

func (f *fakeInstances) act(name, what string, by events.Requestor) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byName[name]; !ok {
		return fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	f.actions = append(f.actions, what+" "+name)
	f.by = append(f.by, by)
	if err := f.failing[name]; err != nil {
		return fmt.Errorf("%s instance %q: %w", what, name, err)
	}
	return nil
}

func (f *fakeInstances) Start(_ context.Context, name string, by events.Requestor) error {
	return f.act(name, "start", by)
}

func (f *fakeInstances) Stop(_ context.Context, name string, o instance.StopOptions, by events.Requestor) error {
	return f.act(name, fmt.Sprintf("stop(force=%v)", o.Force), by)
}

func (f *fakeInstances) Restart(_ context.Context, name string, _ instance.StopOptions, by events.Requestor) error {
	return f.act(name, "restart", by)
}

// requestors returns who asked for each action, in order.
func (f *fakeInstances) requestors() []events.Requestor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.by)
}

func (f *fakeInstances) Timeline(_ context.Context, name string, limit int) ([]instance.TimelineEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byName[name]; !ok {
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	t := f.timeline[name]
	if len(t) > limit {
		t = t[len(t)-limit:]
	}
	return slices.Clone(t), nil
}

func (f *fakeInstances) performed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.actions)
}

// memLog is an in-memory event log under a real events.Bus.
type memLog struct {
	mu  sync.Mutex
	evs []*events.Record
}

var _ events.EventStore = (*memLog)(nil)

func (m *memLog) AppendEvent(_ context.Context, ev *events.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev.ID = int64(len(m.evs) + 1)
	c := *ev
	m.evs = append(m.evs, &c)
	return nil
}

func (m *memLog) EventsAfter(_ context.Context, after int64, limit int) ([]*events.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if after >= int64(len(m.evs)) {
		return nil, nil
	}
	out := m.evs[after:]
	if len(out) > limit {
		out = out[:limit]
	}
	return slices.Clone(out), nil
}

func (m *memLog) LastEventID(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.evs)), nil
}

// busEvents is the dashboard's Events over a real bus and an in-memory log.
type busEvents struct {
	*events.Bus
	log *memLog
}

var _ Events = (*busEvents)(nil)

func newBusEvents() *busEvents {
	l := &memLog{}
	return &busEvents{Bus: events.New(l), log: l}
}

func (b *busEvents) Recent(ctx context.Context, typ string, n int) ([]events.Event, error) {
	b.log.mu.Lock()
	recs := slices.Clone(b.log.evs)
	b.log.mu.Unlock()
	var out []events.Event
	for _, r := range recs {
		if r.Type != typ {
			continue
		}
		var body struct {
			Timestamp time.Time       `json:"timestamp"`
			Metadata  json.RawMessage `json:"metadata"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return nil, fmt.Errorf("decoding stored event %d: %w", r.ID, err)
		}
		out = append(out, events.Event{ID: r.ID, Type: r.Type, Timestamp: body.Timestamp, Instance: r.Instance, Metadata: body.Metadata})
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

func (b *busEvents) publish(t testing.TB, action, name string, ctx map[string]any, by *events.Requestor) events.Event {
	t.Helper()
	ev, err := b.Publish(context.Background(), events.NewLifecycle(action, name, ctx, by))
	if err != nil {
		t.Fatalf("publishing %s of %q: %v", action, name, err)
	}
	return ev
}

type fakeBackends []pluginhost.Status

func (f fakeBackends) List() []pluginhost.Status { return f }

var errBoom = errors.New("backend refused")

// fixture builds instances the way the service reports them.
func ready(name string, started, readyAfter time.Duration) *instance.Instance {
	now := time.Now()
	s := now.Add(-started)
	r := s.Add(readyAfter)
	hb := now.Add(-2 * time.Second)
	return &instance.Instance{
		Name: name, UUID: "uuid-" + name, Backend: "sim", Status: "Ready", StatusCode: 113, Boot: 2,
		Config:    map[string]string{"volatile.last_state.ready": "true", "user.role": "web", "cloud-init.user-data": "#cloud-config", "sim.command": "sleep 1"},
		Devices:   map[string]map[string]string{"eth0": {"type": "nic"}, "root": {"type": "disk"}},
		StartedAt: &s, ReadyAt: &r, Link: "hybrid",
		Agent: instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &hb, Since: &s},
	}
}

func running(name string, agent instance.AgentState) *instance.Instance {
	s := time.Now().Add(-time.Minute)
	return &instance.Instance{Name: name, UUID: "uuid-" + name, Backend: "sim", Status: "Running", StatusCode: 103, Boot: 1, Config: map[string]string{}, StartedAt: &s, Link: "hybrid", Agent: instance.AgentInfo{State: agent}}
}

func stopped(name, backend string) *instance.Instance {
	return &instance.Instance{Name: name, UUID: "uuid-" + name, Backend: backend, Status: "Stopped", StatusCode: 102, Config: map[string]string{}}
}

// newTestApp mounts a dashboard over the fakes on a fiber app configured
// as the daemon configures its TCP app.
func newTestApp(inst Instances, ev Events, cfg Config) (*fiber.App, *Dashboard) {
	cfg.Instances, cfg.Events = inst, ev
	if cfg.Backends == nil {
		cfg.Backends = fakeBackends{{Name: "sim", Version: "1.0", Health: pluginhost.HealthHealthy}, {Name: "qemu", Health: pluginhost.HealthFailed, LastError: "no /dev/kvm"}}
	}
	d := New(cfg)
	app := fiber.New(fiber.Config{Immutable: true, WriteTimeout: 0, DisableStartupMessage: true})
	d.Register(app)
	return app, d
}
