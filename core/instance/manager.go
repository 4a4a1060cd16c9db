package instance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// BackendSource gives the manager the backend plugin of a name;
// core/pluginhost's Host implements it. An unknown name is
// errdefs.ErrNotFound (with the available names in the message).
type BackendSource interface {
	Backend(name string) (sdk.Backend, error)
}

// Config configures a Manager.
type Config struct {
	Store          db.Store      // required
	Backends       BackendSource // required
	Bus            *events.Bus   // required
	Hooks          Hooks         // may be nil
	Files          FilesProvider // may be nil
	Logger         *slog.Logger  // nil discards
	DefaultBackend string        // used when a CreateRequest names none
}

// Timeouts of the manager's own work (not of calls made for a caller).
const (
	eventTimeout   = 30 * time.Second // a backend event's or hook's db writes
	recoverWorkers = 8                // guests recovered in parallel
)

// Manager is the instance service. All methods are safe for concurrent use:
// operations on one instance are serialised, different instances proceed
// in parallel. It keeps every instance (and its runtime state: agent, link,
// running operation, backend details) in memory, written through to the
// store, so reads never query the database.
type Manager struct {
	store    db.Store
	backends BackendSource
	bus      *events.Bus
	hooks    Hooks
	files    FilesProvider
	log      *slog.Logger
	defBack  string

	loadMu sync.Mutex  // serialises loading the cache
	loaded atomic.Bool // the cache holds every stored instance

	mu       sync.RWMutex // guards the maps and every entry's rec and rt
	byName   map[string]*entry
	byLower  map[string]*entry // by canonicalName, see names.go
	byUUID   map[string]*entry
	sorted   []*entry        // by name, for List
	reserved map[string]bool // names being created

	infoMu sync.Mutex
	infos  map[string]*sdk.Info // backend Info cache, reset by Recover

	retry  writeRetry    // how failed store writes are retried
	lostMu sync.Mutex    // guards lost
	lost   map[int64]int // timeline entries lost, by instance ID, not yet reported
}

// entry is one instance in memory.
type entry struct {
	op   sync.Mutex // held for a whole lifecycle operation (start, stop, ...)
	mu   sync.Mutex // held for one read-modify-write of rec and rt
	hook sync.Mutex // held while a hook is called: hooks see an instance's changes in order

	name  string // never changes
	lname string // lowercase name, for List's query

	// Guarded by Manager.mu; replaced, never changed in place.
	rec *db.Instance
	rt  runtime
}

// newEntry returns the entry of a stored instance.
func newEntry(rec *db.Instance) *entry {
	return &entry{name: rec.Name, lname: strings.ToLower(rec.Name), rec: rec}
}

// addLocked makes e known by name and uuid; Manager.mu must be held.
func (m *Manager) addLocked(e *entry) {
	m.byName[e.name] = e
	m.indexNameLocked(e)
	m.byUUID[e.rec.UUID] = e
	i, _ := slices.BinarySearchFunc(m.sorted, e.name, func(x *entry, name string) int { return strings.Compare(x.name, name) })
	m.sorted = slices.Insert(m.sorted, i, e)
}

// removeLocked forgets e; Manager.mu must be held.
func (m *Manager) removeLocked(e *entry) {
	delete(m.byName, e.name)
	m.unindexNameLocked(e)
	delete(m.byUUID, e.rec.UUID)
	if i, ok := slices.BinarySearchFunc(m.sorted, e.name, func(x *entry, name string) int { return strings.Compare(x.name, name) }); ok {
		m.sorted = slices.Delete(m.sorted, i, i+1)
	}
}

// runtime is what the manager knows of an instance beyond its stored row.
type runtime struct {
	op          string // status.OpStarting, status.OpStopping or ""
	agent       AgentInfo
	link        string
	details     map[string]string
	readyAt     *time.Time
	pendingExit *sdk.Event // an exit that arrived during an operation
	deleted     bool
}

// NewManager returns a manager. It does not touch the store: call Init at
// daemon start (the first call of any method loads the instances otherwise).
func NewManager(cfg Config) (*Manager, error) {
	switch {
	case cfg.Store == nil:
		return nil, fmt.Errorf("creating instance manager: no store: %w", errdefs.ErrInvalid)
	case cfg.Backends == nil:
		return nil, fmt.Errorf("creating instance manager: no backend source: %w", errdefs.ErrInvalid)
	case cfg.Bus == nil:
		return nil, fmt.Errorf("creating instance manager: no event bus: %w", errdefs.ErrInvalid)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		store:    cfg.Store,
		backends: cfg.Backends,
		bus:      cfg.Bus,
		hooks:    cfg.Hooks,
		files:    cfg.Files,
		log:      log,
		defBack:  cfg.DefaultBackend,
		byName:   make(map[string]*entry),
		byLower:  make(map[string]*entry),
		byUUID:   make(map[string]*entry),
		reserved: make(map[string]bool),
		infos:    make(map[string]*sdk.Info),
		retry:    defaultWriteRetry,
		lost:     make(map[int64]int),
	}, nil
}

// load reads every instance from the store into memory, once (or again
// with force).
func (m *Manager) load(ctx context.Context, force bool) error {
	if !force && m.loaded.Load() {
		return nil
	}
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	if !force && m.loaded.Load() {
		return nil
	}
	recs, err := m.store.ListInstances(ctx, db.InstanceFilter{})
	if err != nil {
		return fmt.Errorf("loading instances: %w", storeErr(err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rec := range recs {
		if e, ok := m.byName[rec.Name]; ok {
			e.rec = rec
			continue
		}
		m.addLocked(newEntry(rec))
	}
	if !m.loaded.Load() {
		m.warnNameCasesLocked()
	}
	m.loaded.Store(true)
	return nil
}

// storeErr maps the store's error kinds to the daemon's.
func storeErr(err error) error {
	switch {
	case errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case errors.Is(err, db.ErrAlreadyExists):
		return fmt.Errorf("%w: %w", errdefs.ErrAlreadyExists, err)
	}
	return err
}

// lookup returns the entry of a live instance.
func (m *Manager) lookup(ctx context.Context, name string) (*entry, error) {
	if err := m.load(ctx, false); err != nil {
		return nil, err
	}
	m.mu.RLock()
	e, ok := m.findLocked(name)
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	return e, nil
}

func (m *Manager) lookupUUID(ctx context.Context, uuid string) (*entry, error) {
	if err := m.load(ctx, false); err != nil {
		return nil, err
	}
	m.mu.RLock()
	e, ok := m.byUUID[uuid]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("instance with uuid %q: %w", uuid, errdefs.ErrNotFound)
	}
	return e, nil
}

// Get returns the instance called name (errdefs.ErrNotFound if none).
func (m *Manager) Get(ctx context.Context, name string) (*Instance, error) {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return viewOf(e), nil
}

// GetByUUID returns the instance whose volatile.uuid is uuid
// (errdefs.ErrNotFound if none).
func (m *Manager) GetByUUID(ctx context.Context, uuid string) (*Instance, error) {
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return viewOf(e), nil
}

// ListFilter narrows List. Zero values match everything.
type ListFilter struct {
	// Status is a status name (status.Parse: "Running", "Ready", "Stopped",
	// any case, or a code). "Running" matches Ready instances too.
	Status  string
	Backend string // exact backend name
	// Agent is an agent state ("started", "connected", "stopped", "lost");
	// "none" matches instances without an agent.
	Agent string
	Query string // case-insensitive substring of the name
}

// List returns the instances matching f, sorted by name. It reads memory
// only. A bad Status is errdefs.ErrInvalid.
func (m *Manager) List(ctx context.Context, f ListFilter) ([]*Instance, error) {
	var out []*Instance
	err := m.list(ctx, f, func(matched []snapshot) error {
		views := make([]Instance, len(matched)) // one allocation for all views
		out = make([]*Instance, len(matched))
		for i := range matched {
			fillView(&views[i], matched[i].rec, &matched[i].rt, false)
			out[i] = &views[i]
		}
		return nil
	})
	return out, err
}

// ListFunc calls fn with the view of every instance matching f, in name
// order, as List would return them, for callers that only serialise the list
// (GET /1.0/instances): the views are not copies. Each view shares the
// manager's maps and times (which are replaced, never changed in place) and
// is valid only during its call; fn must not keep or change it. fn runs
// without the manager's lock, on a snapshot taken when ListFunc was called:
// a slow listing (thousands of instances, a flood of concurrent lists) never
// holds up state changes, agent updates or timeline writes. An error from fn
// ends the listing and is returned.
func (m *Manager) ListFunc(ctx context.Context, f ListFilter, fn func(*Instance) error) error {
	return m.list(ctx, f, func(matched []snapshot) error {
		var view Instance
		for i := range matched {
			fillView(&view, matched[i].rec, &matched[i].rt, true)
			if err := fn(&view); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshot is an entry's state at one instant: its record and runtime are
// replaced, never changed in place, so the copy stays valid without the
// lock.
type snapshot struct {
	rec *db.Instance
	rt  runtime
}

// list calls fn with snapshots of the entries matching f, taken under the
// read lock; fn runs after the lock is released.
func (m *Manager) list(ctx context.Context, f ListFilter, fn func([]snapshot) error) error {
	var want status.Code
	if f.Status != "" {
		c, err := status.Parse(f.Status)
		if err != nil {
			return fmt.Errorf("listing instances: %w", err)
		}
		want = c
	}
	agent := AgentState(f.Agent)
	if f.Agent == "none" {
		agent = AgentNone
	}
	q := strings.ToLower(f.Query)
	if err := m.load(ctx, false); err != nil {
		return err
	}
	m.mu.RLock()
	matched := make([]snapshot, 0, len(m.sorted))
	for _, e := range m.sorted {
		if f.Backend != "" && e.rec.Backend != f.Backend {
			continue
		}
		if f.Agent != "" && e.rt.agent.State != agent {
			continue
		}
		if q != "" && !strings.Contains(e.lname, q) {
			continue
		}
		if f.Status != "" {
			got := statusOf(e)
			if got != want && !(want == status.Running && status.IsRunning(got)) {
				continue
			}
		}
		matched = append(matched, snapshot{rec: e.rec, rt: e.rt})
	}
	m.mu.RUnlock()
	return fn(matched)
}

// Runtime returns the backend and the current handle of the instance with
// the given uuid, for the services that talk to its guest directly
// (core/agentmon reads the ring). An instance whose guest was never created
// is errdefs.ErrConflict.
func (m *Manager) Runtime(ctx context.Context, uuid string) (sdk.Backend, sdk.Handle, error) {
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return nil, nil, err
	}
	m.mu.RLock()
	name, backend, h := e.rec.Name, e.rec.Backend, slices.Clone(e.rec.Handle)
	m.mu.RUnlock()
	if len(h) == 0 {
		return nil, nil, fmt.Errorf("instance %q has no guest yet: %w", name, errdefs.ErrConflict)
	}
	b, err := m.backends.Backend(backend)
	if err != nil {
		return nil, nil, fmt.Errorf("instance %q: %w", name, err)
	}
	return b, h, nil
}

// statusOf derives an entry's status; Manager.mu must be held.
func statusOf(e *entry) status.Code {
	return statusOfState(e.rec, &e.rt)
}

// statusOfState derives the status of a record and runtime.
func statusOfState(rec *db.Instance, rt *runtime) status.Code {
	return status.Derive(rec.PowerState, rec.Config[KeyReady] == "true", rt.op)
}

// viewOf builds the Instance view of an entry; Manager.mu must be held.
func viewOf(e *entry) *Instance {
	inst := new(Instance)
	fillView(inst, e.rec, &e.rt, false)
	return inst
}

// noDevices is the Devices of shared views of entries without devices.
var noDevices = map[string]map[string]string{}

// noConfig is the Config of shared views of entries without config.
var noConfig = map[string]string{}

// fillView fills inst with the view of an entry's record and runtime (taken
// under Manager.mu, or a snapshot). A shared view (ListFunc) points at the
// entry's maps and times instead of copies of them.
func fillView(inst *Instance, rec *db.Instance, rt *runtime, shared bool) {
	code := statusOfState(rec, rt)
	*inst = Instance{
		Name:       rec.Name,
		UUID:       rec.UUID,
		Backend:    rec.Backend,
		Status:     code.String(),
		StatusCode: int(code),
		Boot:       rec.Boot,
		CreatedAt:  rec.CreatedAt,
		Link:       rt.link,
		Agent: AgentInfo{
			State: rt.agent.State,
		},
		DevlxdSocket: rt.details["devlxd_socket"],
	}
	if shared {
		inst.Config, inst.Devices = rec.Config, rec.Devices
		inst.StartedAt, inst.ReadyAt = rec.StartedAt, rt.readyAt
		inst.Agent.LastHeartbeat, inst.Agent.Since = rt.agent.LastHeartbeat, rt.agent.Since
		if inst.Devices == nil {
			inst.Devices = noDevices
		}
		if len(rt.details) > 0 {
			inst.Details = rt.details
		}
		if inst.Config == nil {
			inst.Config = noConfig
		}
		return
	}
	inst.Config = maps.Clone(rec.Config)
	inst.Devices = cloneDevices(rec.Devices)
	inst.StartedAt, inst.ReadyAt = cloneTime(rec.StartedAt), cloneTime(rt.readyAt)
	inst.Agent.LastHeartbeat, inst.Agent.Since = cloneTime(rt.agent.LastHeartbeat), cloneTime(rt.agent.Since)
	if inst.Config == nil {
		inst.Config = map[string]string{}
	}
	if len(rt.details) > 0 {
		inst.Details = maps.Clone(rt.details)
	}
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func cloneDevices(d map[string]map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string, len(d))
	for k, v := range d {
		out[k] = maps.Clone(v)
	}
	return out
}

func cloneRec(r *db.Instance) *db.Instance {
	c := *r
	c.Config = maps.Clone(r.Config)
	if c.Config == nil {
		c.Config = map[string]string{}
	}
	c.Devices = cloneDevices(r.Devices)
	c.Handle = slices.Clone(r.Handle)
	c.StartedAt = cloneTime(r.StartedAt)
	return &c
}

func (rt runtime) clone() runtime {
	c := rt
	c.details = maps.Clone(rt.details)
	c.agent.LastHeartbeat = cloneTime(rt.agent.LastHeartbeat)
	c.agent.Since = cloneTime(rt.agent.Since)
	c.readyAt = cloneTime(rt.readyAt)
	return c
}

// change is one read-modify-write of an instance, built by mutate's
// callback: the copies to modify, and what to record and announce.
type change struct {
	rec      *db.Instance
	rt       runtime
	persist  bool // rec changed and must be saved
	timeline []*db.TimelineEntry
	events   []events.Event
	now      time.Time
}

// note appends a timeline entry.
func (c *change) note(kind, from, to, cause, detail string) {
	c.timeline = append(c.timeline, &db.TimelineEntry{
		InstanceID: c.rec.ID, Time: c.now, Boot: c.rec.Boot,
		Kind: kind, From: from, To: to, Cause: cause, Detail: detail,
	})
}

// emit queues a lifecycle event.
func (c *change) emit(action string, ctx map[string]any, by events.Requestor) {
	ev := events.NewLifecycle(action, c.rec.Name, ctx, &by)
	ev.Timestamp = c.now
	c.events = append(c.events, ev)
}

// setReadyFalse clears the Ready flag for a stop, exit or reset; it records
// a "ready" timeline entry when the flag was true.
func (c *change) setReadyFalse(cause, detail string) bool {
	was := c.rec.Config[KeyReady] == "true"
	if c.rec.Config[KeyReady] != "false" {
		c.rec.Config[KeyReady] = "false"
		c.persist = true
	}
	c.rt.readyAt = nil
	if was {
		c.note(kindReady, "true", "false", cause, detail)
	}
	return was
}

// Timeline kinds.
const (
	kindState = "state"
	kindAgent = "agent"
	kindReady = "ready"
)

// mutate runs fn on copies of e's state under e's write lock, saves the
// result (with its timeline entries in the same transaction), makes it the
// current state, then publishes the queued events. A failed fn or save
// changes nothing. It returns the new view.
func (m *Manager) mutate(ctx context.Context, e *entry, fn func(c *change) error) (*Instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m.mu.RLock()
	if e.rt.deleted {
		name := e.rec.Name
		m.mu.RUnlock()
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	c := &change{rec: cloneRec(e.rec), rt: e.rt.clone(), now: time.Now().UTC()}
	m.mu.RUnlock()
	if err := fn(c); err != nil {
		return nil, err
	}
	if c.persist {
		tl, lost := m.withLost(c.rec.ID, c.now, c.rec.Boot, c.timeline)
		err := m.retryWrite(ctx, fmt.Sprintf("saving instance %q", c.rec.Name), func(ctx context.Context) error {
			return storeErr(m.store.UpdateInstanceWithTimeline(ctx, c.rec, tl...))
		})
		if err != nil {
			return nil, err
		}
		m.reportedLost(c.rec.ID, lost)
	}
	m.mu.Lock()
	e.rec, e.rt = c.rec, c.rt
	view := viewOf(e)
	m.mu.Unlock()
	if !c.persist && len(c.timeline) > 0 {
		// Before the events, so that a watcher that reads the timeline
		// when an event arrives finds the entry.
		m.appendTimeline(ctx, c.rec.Name, c.timeline...)
	}
	m.publish(ctx, c.events)
	return view, nil
}

// Hook call conditions for notify.
var (
	always      = func(*entry) bool { return true }
	whenRunning = func(e *entry) bool { return e.rec.PowerState == status.PowerRunning }
)

// bootRunning returns a condition true while boot of the instance runs.
func bootRunning(boot int64) func(*entry) bool {
	return func(e *entry) bool { return e.rec.PowerState == status.PowerRunning && e.rec.Boot == boot }
}

// notify calls a hook with e's current view, one hook call per instance at
// a time, unless cond (checked under Manager.mu) says the call no longer
// applies: a guest that stopped before its GuestRunning call could be made
// is only reported stopped, never running after stopped.
func (m *Manager) notify(e *entry, cond func(*entry) bool, call func(h Hooks, inst *Instance)) {
	if m.hooks == nil {
		return
	}
	e.hook.Lock()
	defer e.hook.Unlock()
	m.mu.RLock()
	ok := !e.rt.deleted && cond(e)
	view := viewOf(e)
	m.mu.RUnlock()
	if ok {
		call(m.hooks, view)
	}
}

// publish publishes events; the change they announce is already made, so a
// failure (after the bus's retries) is not returned: it is logged and
// recorded in the instance's timeline (eventLost).
func (m *Manager) publish(ctx context.Context, evs []events.Event) {
	for _, ev := range evs {
		if _, err := m.bus.Publish(context.WithoutCancel(ctx), ev); err != nil {
			m.log.Error("publishing event", "instance", ev.Instance, "type", ev.Type, "err", err)
			m.eventLost(ctx, ev, err)
		}
	}
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// causeOf names the timeline cause of a requestor.
func causeOf(by events.Requestor) string {
	switch by.Protocol {
	case "devlxd", "agent", "backend", "daemon":
		return by.Protocol
	}
	return by.APICause()
}

// Requestors of the manager's own changes.
var (
	byBackend = events.Requestor{Protocol: "backend"}
	byDaemon  = events.Requestor{Protocol: "daemon"}
)

// backendInfo returns the Info of a backend (cached).
func (m *Manager) backendInfo(ctx context.Context, name string) (sdk.Backend, *sdk.Info, error) {
	b, err := m.backends.Backend(name)
	if err != nil {
		return nil, nil, err
	}
	m.infoMu.Lock()
	info := m.infos[name]
	m.infoMu.Unlock()
	if info != nil {
		return b, info, nil
	}
	info, err = b.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("asking backend %q for its info: %w", name, err)
	}
	m.infoMu.Lock()
	m.infos[name] = info
	m.infoMu.Unlock()
	return b, info, nil
}

// spec builds the GuestSpec of an instance's stored state.
func specOf(rec *db.Instance, files []sdk.File) *sdk.GuestSpec {
	devs := make(map[string]sdk.Device, len(rec.Devices))
	for k, v := range rec.Devices {
		devs[k] = sdk.Device(maps.Clone(v))
	}
	return &sdk.GuestSpec{
		Name:    rec.Name,
		UUID:    rec.UUID,
		Config:  maps.Clone(rec.Config),
		Devices: devs,
		Files:   files,
	}
}
