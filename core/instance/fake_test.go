package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// fakeBackend is an in-process contract.Backend for the manager's unit tests.
// Its errors carry errdefs kinds, as plugins/pluginhost's translated ones do.
type fakeBackend struct {
	name     string
	delay    time.Duration // added to Start and Stop
	stateful bool          // announce contract.CapStateful
	disk     bool          // announce contract.CapDisk
	nic      bool          // announce contract.CapNICUser
	// onStart and onStop run inside Start and Stop (to send events
	// while an operation runs).
	onStart func(spec *contract.GuestSpec)
	onStop  func(uuid string)
	// onRecover runs at the end of Recover, before it answers.
	onRecover func(uuid string)

	mu     sync.Mutex
	guests map[string]*fakeGuest // by handle
	seq    int
	calls  []string

	overlap atomic.Int32 // calls that overlapped another call on the same guest
}

type fakeGuest struct {
	uuid     string
	running  bool
	busy     bool
	stateful bool
	spec     *contract.GuestSpec
}

var _ contract.Backend = (*fakeBackend)(nil)

func newFakeBackend(name string) *fakeBackend {
	return &fakeBackend{name: name, guests: map[string]*fakeGuest{}}
}

func (f *fakeBackend) Info(context.Context) (*contract.Info, error) {
	caps := []contract.Capability{contract.CapRecover, contract.CapLinkHybrid}
	if f.stateful {
		caps = append(caps, contract.CapStateful)
	}
	if f.disk {
		caps = append(caps, contract.CapDisk)
	}
	if f.nic {
		caps = append(caps, contract.CapNICUser)
	}
	return &contract.Info{Name: f.name, Version: "1", ConfigPrefixes: []string{"fake."}, Capabilities: caps}, nil
}

func (f *fakeBackend) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

// enter marks the guest busy for a call and reports overlapping calls.
func (f *fakeBackend) enter(h contract.Handle) (*fakeGuest, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.guests[string(h)]
	if !ok {
		return nil, nil, fmt.Errorf("guest %s: %w", h, errdefs.ErrNotFound)
	}
	if g.busy {
		f.overlap.Add(1)
	}
	g.busy = true
	return g, func() { f.mu.Lock(); g.busy = false; f.mu.Unlock() }, nil
}

func (f *fakeBackend) Create(_ context.Context, spec *contract.GuestSpec) (contract.Handle, error) {
	for k := range spec.Config {
		if strings.HasPrefix(k, "fake.") && k != "fake.cmd" && k != "fake.fail" {
			return nil, fmt.Errorf("unknown configuration key %q: %w", k, errdefs.ErrInvalid)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	h := fmt.Sprintf(`{"id":%d}`, f.seq)
	f.guests[h] = &fakeGuest{uuid: spec.UUID, spec: spec}
	f.calls = append(f.calls, "create "+spec.Name)
	return contract.Handle(h), nil
}

func (f *fakeBackend) Start(_ context.Context, h contract.Handle, spec *contract.GuestSpec) (contract.Handle, *contract.GuestState, error) {
	g, leave, err := f.enter(h)
	if err != nil {
		return nil, nil, err
	}
	defer leave()
	f.record("start " + spec.Name)
	time.Sleep(f.delay) // the behaviour under test: a slow plugin call (delay is 0 unless a test sets it)
	switch spec.Config["fake.fail"] {
	case "start":
		return nil, nil, fmt.Errorf("the emulator crashed: %w", errdefs.ErrUnavailable)
	case "invalid":
		return nil, nil, fmt.Errorf("bad fake.cmd: %w", errdefs.ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if g.running {
		return nil, nil, fmt.Errorf("guest runs: %w", errdefs.ErrConflict)
	}
	g.running = true
	g.spec = spec
	if f.onStart != nil {
		f.mu.Unlock()
		f.onStart(spec)
		f.mu.Lock()
	}
	return h, &contract.GuestState{Status: contract.StatusRunning, PID: 42, Details: map[string]string{"devlxd_socket": "/run/" + spec.Name + "/sock"}}, nil
}

func (f *fakeBackend) Stop(_ context.Context, h contract.Handle, opts contract.StopOptions) (*contract.GuestState, error) {
	g, leave, err := f.enter(h)
	if err != nil {
		return nil, err
	}
	defer leave()
	f.record("stop")
	time.Sleep(f.delay) // the behaviour under test: a slow plugin call (delay is 0 unless a test sets it)
	f.mu.Lock()
	defer f.mu.Unlock()
	g.running = false
	g.stateful = opts.Stateful
	if f.onStop != nil {
		f.mu.Unlock()
		f.onStop(g.uuid)
		f.mu.Lock()
	}
	return &contract.GuestState{Status: contract.StatusStopped}, nil
}

func (f *fakeBackend) Delete(_ context.Context, h contract.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.guests[string(h)]
	if !ok {
		return nil
	}
	if g.running {
		return fmt.Errorf("guest runs: %w", errdefs.ErrConflict)
	}
	delete(f.guests, string(h))
	return nil
}

func (f *fakeBackend) State(_ context.Context, h contract.Handle) (*contract.GuestState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.guests[string(h)]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	st := contract.StatusStopped
	if g.running {
		st = contract.StatusRunning
	}
	return &contract.GuestState{Status: st, HasSavedState: g.stateful}, nil
}

func (f *fakeBackend) Events(ctx context.Context) (<-chan contract.Event, error) {
	ch := make(chan contract.Event)
	close(ch)
	return ch, nil
}

func (f *fakeBackend) ReadRing(context.Context, contract.Handle, int) ([]byte, error) {
	return nil, nil
}

func (f *fakeBackend) LinkEndpoint(_ context.Context, h contract.Handle) (*contract.LinkEndpoint, error) {
	return &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: "/run/" + string(h) + ".vsock"}, nil
}

func (f *fakeBackend) Recover(_ context.Context, h contract.Handle, _ *contract.GuestSpec) (contract.Handle, *contract.GuestState, error) {
	st, err := f.State(context.Background(), h)
	if err != nil {
		return nil, nil, err
	}
	if f.onRecover != nil {
		f.mu.Lock()
		uuid := f.guests[string(h)].uuid
		f.mu.Unlock()
		f.onRecover(uuid)
	}
	if st.Status == contract.StatusRunning {
		st.Details = map[string]string{"devlxd_socket": "/run/recovered/sock"}
	}
	return h, st, nil
}

// kill ends a guest behind the manager's back (as a crash would).
func (f *fakeBackend) kill(uuid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.guests {
		if g.uuid == uuid {
			g.running = false
		}
	}
}

func (f *fakeBackend) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.guests)
}

// fakeBackends is a BackendSource of fake backends.
type fakeBackends map[string]*fakeBackend

func (s fakeBackends) Backend(name string) (contract.Backend, error) {
	b, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("backend %q (available: fake): %w", name, errdefs.ErrNotFound)
	}
	return b, nil
}

// recHooks records hook calls as "kind name".
type recHooks struct {
	mu    sync.Mutex
	calls []string
	eps   []*contract.LinkEndpoint
	chg   [][]ConfigChange
}

var (
	_ Hooks       = (*recHooks)(nil)
	_ DeleteHooks = (*recHooks)(nil)
)

func (h *recHooks) add(s string) { h.mu.Lock(); h.calls = append(h.calls, s); h.mu.Unlock() }
func (h *recHooks) GuestRunning(inst *Instance, ep *contract.LinkEndpoint) {
	h.mu.Lock()
	h.eps = append(h.eps, ep)
	h.mu.Unlock()
	h.add("running " + inst.Name)
}
func (h *recHooks) GuestStopped(inst *Instance)    { h.add("stopped " + inst.Name) }
func (h *recHooks) GuestReset(inst *Instance)      { h.add("reset " + inst.Name) }
func (h *recHooks) InstanceDeleted(inst *Instance) { h.add("deleted " + inst.Name) }
func (h *recHooks) BackendEvent(inst *Instance, ev contract.Event) {
	h.add(ev.Kind.String() + " " + inst.Name)
}
func (h *recHooks) ConfigChanged(inst *Instance, c []ConfigChange) {
	h.mu.Lock()
	h.chg = append(h.chg, c)
	h.mu.Unlock()
	h.add("config " + inst.Name)
}

func (h *recHooks) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

// recFiles is a FilesProvider that records its calls.
type recFiles struct{ n atomic.Int32 }

var _ FilesProvider = (*recFiles)(nil)

func (f *recFiles) GuestFiles(_ context.Context, inst *Instance) ([]contract.File, error) {
	f.n.Add(1)
	return []contract.File{{Path: "agent.crt", Mode: 0o644, Data: []byte(inst.UUID)}}, nil
}

// env is a manager on a real SQLite store with a fake backend.
type env struct {
	t     testing.TB
	store db.Store
	bus   *events.Bus
	be    *fakeBackend
	hooks *recHooks
	files *recFiles
	// images is the manager's image source (nil: none); set it before
	// calling manager().
	images ImageSource
	// budget is the manager's state budget (nil: its own default); set it
	// before calling manager().
	budget *statebudget.Budget
	m      *Manager
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st := dbtest.SQLite(t)
	bus := events.New(st)
	t.Cleanup(func() { _ = bus.Close() })
	e := &env{t: t, store: st, bus: bus, be: newFakeBackend("fake"), hooks: &recHooks{}, files: &recFiles{}}
	e.m = e.manager()
	return e
}

// manager returns a new manager on env's store, as after a daemon restart.
func (e *env) manager() *Manager {
	e.t.Helper()
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus,
		Hooks: e.hooks, Files: e.files, DefaultBackend: "fake", Images: e.images, StateBudget: e.budget})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

var adminCaller = events.Requestor{Protocol: "unix", Username: "root"}

func (e *env) create(name string, cfg map[string]string) *Instance {
	e.t.Helper()
	inst, err := e.m.Create(context.Background(), CreateRequest{Name: name, Config: cfg}, adminCaller)
	if err != nil {
		e.t.Fatalf("creating %s: %v", name, err)
	}
	return inst
}

func (e *env) get(name string) *Instance {
	e.t.Helper()
	inst, err := e.m.Get(context.Background(), name)
	if err != nil {
		e.t.Fatalf("getting %s: %v", name, err)
	}
	return inst
}

// actions returns the lifecycle actions stored for an instance, in order.
func (e *env) actions(name string) []string {
	e.t.Helper()
	recs, err := e.store.EventsAfter(context.Background(), 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Instance != name {
			continue
		}
		var body struct {
			Metadata events.Lifecycle `json:"metadata"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, body.Metadata.Action)
	}
	return out
}

func (e *env) timeline(name string) []string {
	e.t.Helper()
	tl, err := e.m.Timeline(context.Background(), name, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, len(tl))
	for i, x := range tl {
		out[i] = fmt.Sprintf("%s %s->%s %s", x.Kind, x.From, x.To, x.Cause)
	}
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
