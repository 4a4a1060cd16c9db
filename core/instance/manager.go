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
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// BackendSource gives the manager the backend plugin of a name;
// plugins/pluginhost's Host implements it. An unknown name is
// errdefs.ErrNotFound (with the available names in the message).
type BackendSource interface {
	Backend(name string) (contract.Backend, error)
}

// Config configures a Manager.
type Config struct {
	Store          record.Store  // required
	Backends       BackendSource // required
	Bus            *events.Bus   // required
	Hooks          Hooks         // may be nil
	Files          FilesProvider // may be nil
	Logger         *slog.Logger  // nil discards
	DefaultBackend string        // used when a CreateRequest names none
	// Volumes checks that a disk device's pool volume exists (core/storage);
	// nil refuses disks with a source.
	Volumes VolumeChecker
	// AllowDiskPaths lets disk devices take a host path as source; off by
	// default (only pool volumes).
	AllowDiskPaths bool
	Images         ImageSource // may be nil: CreateRequest.Image is then refused
	// Location is the cluster member this daemon is: the manager runs only
	// the instances located on it, and new ones are located on it. ""
	// (no cluster) means every instance in the store.
	Location string
	// StateBudget is the per-guest budget of state changes shared with
	// devlxd PATCH /1.0 and the agent monitor's ring words
	// (core/statebudget): every reboot of a guest (contract.EventReset) draws
	// from it too before it is recorded. Nil makes a Budget with the
	// defaults for this manager alone.
	StateBudget *statebudget.Budget
	// Freezer freezes a running guest's filesystems around a snapshot
	// (core/agentmon); nil takes every snapshot crash-consistent.
	Freezer FSFreezer
}

// ImageSource finds the store images instances boot from (core/images.Store).
type ImageSource interface {
	// Fingerprint resolves an alias, fingerprint or fingerprint prefix;
	// errdefs.ErrNotFound if no image matches.
	Fingerprint(ctx context.Context, ref string) (string, error)
	// Spec returns what a backend is told about the image fp.
	Spec(ctx context.Context, fp string) (*contract.Image, error)
	// Properties returns the image's recorded properties (requirements.memory).
	Properties(ctx context.Context, fp string) (map[string]string, error)
}

// Timeouts of the manager's own work (not of calls made for a caller).
const (
	eventTimeout = 30 * time.Second // a backend event's or hook's db writes
	// recoverWorkers is how many guests are recovered in parallel: each
	// waits on two plugin calls (Recover, LinkEndpoint), so at 10,000
	// guests 8 workers spent most of a restart waiting on round trips.
	recoverWorkers = 64
)

// Manager is the instance service. All methods are safe for concurrent use:
// operations on one instance are serialised, different instances proceed
// in parallel. It keeps every instance (and its runtime state: agent, link,
// running operation, backend details) in memory, written through to the
// store, so reads never query the database.
type Manager struct {
	budget   *statebudget.Budget // per-guest state changes: reboots (Config.StateBudget)
	store    record.Store
	backends BackendSource
	bus      *events.Bus
	hooks    Hooks
	files    FilesProvider
	freezer  FSFreezer // Config.Freezer
	log      *slog.Logger
	defBack  string
	devices  deviceConfig
	images   ImageSource
	location string // Config.Location

	defaultProfile atomic.Bool // the default profile is known to exist (profiles.go)
	profMu         sync.Mutex
	profCache      map[string]*record.Profile // the profiles last read or written, by name (profiles.go); never changed in place

	loadMu sync.Mutex  // serialises loading the cache
	loaded atomic.Bool // the cache holds every stored instance

	mu       sync.RWMutex // guards the maps and every entry's rec and rt
	byName   map[string]*entry
	byLower  map[string]*entry // by canonicalName, see names.go
	byUUID   map[string]*entry
	sorted   []*entry        // by name, for List
	reserved map[string]bool // names being created

	infoMu sync.Mutex
	infos  map[string]*contract.Info // backend Info cache, reset by Recover

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

	waiters      []*waiter   // guarded by Manager.mu (wait.go)
	readyTimer   *time.Timer // guarded by mu: readiness.timeout of this boot (readiness.go)
	readyTimerAt time.Time   // guarded by mu: when readyTimer fires

	// recoveryHeld reports that op is held for the daemon's start-up
	// recovery (Load took it; RecoverAll's worker releases it once the
	// guest is recovered): operations on the instance wait for it.
	recoveryHeld atomic.Bool

	// beat is the agent's last heartbeat recorded without a change
	// (heartbeatOnly); views show it when it is later than
	// rt.agent.LastHeartbeat (heartbeatOf). An atomic, so that a heartbeat
	// (every 5 s of every running guest's life) takes only Manager.mu's read
	// lock and never waits for mu, which a change holds while its store
	// write runs (up to writeRetry's 15 s). When heartbeats took mu, a
	// 10,000-guest Ready storm held them behind the declarations' writes:
	// the plugin's event stream, which delivers them in turn, stalled, and
	// thousands of agents were declared lost.
	beat atomic.Pointer[time.Time]

	// ident is the instance with e's identity only, kept for the hooks
	// called at every heartbeat (identityOf); an atomic because it is made
	// under Manager.mu's read lock.
	ident atomic.Pointer[Instance]

	// Guarded by Manager.mu; replaced, never changed in place.
	rec *record.Instance
	rt  runtime
	// stored is the record as last read from or written to the store (rec
	// itself, unless a change made rec without saving it), guarded by
	// Manager.mu and never changed in place: the base from which the
	// store writes only what a change changed (changeFromWriter).
	stored *record.Instance
	// version is the view's change version (ListCachedFunc), guarded by
	// Manager.mu: bumped (changedLocked) with every change of rec or rt
	// but a heartbeat's time (heartbeatOnly).
	version uint64
	// cache keeps what a lister derived from the view (ListCachedFunc).
	cache ViewCache
}

// heartbeatOf returns the heartbeat a view of e shows, given its runtime's
// hb: the later of hb and e.beat, or nil when hb is nil (no heartbeat this
// boot: a stopped or started guest's runtime clears it, and e.beat is then
// an older boot's).
func (e *entry) heartbeatOf(hb *time.Time) *time.Time {
	if hb == nil {
		return nil
	}
	if b := e.beat.Load(); b != nil && b.After(*hb) {
		return b
	}
	return hb
}

// changedLocked bumps e's change version after rec or rt changed;
// Manager.mu must be held for writing.
func (e *entry) changedLocked() { e.version++ }

// newEntry returns the entry of a stored instance.
func newEntry(rec *record.Instance) *entry {
	e := &entry{name: rec.Name, lname: strings.ToLower(rec.Name), rec: rec, stored: rec}
	e.rt.conds = conditionsOf(rec, &e.rt) // derived once, not at every read
	return e
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
	pendingExit *contract.Event // an exit that arrived during an operation
	deleted     bool

	// resetThrottled is when the last reboot over the state budget came
	// (zero: none this episode); resetsDropped counts the reboots not
	// recorded since the last one recorded.
	resetThrottled time.Time
	resetsDropped  int

	declared      Declaration // the guest's last PATCH /1.0 this boot
	readyTimedOut bool        // readiness.timeout passed this boot without Ready
	conds         []Condition // derived by every change (conditions.go); nil until the first
	oom           oomState    // this boot's OOM kills (oom.go)

	// unrecovered reports that the daemon has not yet recovered the
	// guest since it started (Load .. RecoverAll): the view's status is
	// Unknown, with StatusReason ReasonRecovering.
	unrecovered bool
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
	budget := cfg.StateBudget
	if budget == nil {
		budget = statebudget.New(0, 0)
	}
	return &Manager{
		budget:   budget,
		store:    cfg.Store,
		backends: cfg.Backends,
		bus:      cfg.Bus,
		hooks:    cfg.Hooks,
		files:    cfg.Files,
		freezer:  cfg.Freezer,
		log:      log,
		defBack:  cfg.DefaultBackend,
		devices:  deviceConfig{volumes: cfg.Volumes, allowPaths: cfg.AllowDiskPaths},
		images:   cfg.Images,
		location: cfg.Location,
		byName:   make(map[string]*entry),
		byLower:  make(map[string]*entry),
		byUUID:   make(map[string]*entry),
		reserved: make(map[string]bool),
		infos:    make(map[string]*contract.Info),
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
	recs, err := m.store.ListInstances(ctx, record.Filter{Location: m.location})
	if err != nil {
		return fmt.Errorf("loading instances: %w", storeErr(err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rec := range recs {
		if e, ok := m.byName[rec.Name]; ok {
			e.rec, e.stored = rec, rec
			e.rt.conds = deriveConditions(rec, &e.rt, e.rt.conds, time.Now().UTC())
			e.changedLocked()
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
	case errors.Is(err, errdefs.ErrNotFound):
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case errors.Is(err, errdefs.ErrAlreadyExists):
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
	inst, rec := viewOf(e), e.rec
	m.mu.RUnlock()
	m.expandForGuest(ctx, inst, rec) // profiles.go
	return inst, nil
}

// Runtime returns the backend and the current handle of the instance with
// the given uuid, for the services that talk to its guest directly
// (core/agentmon reads the ring). An instance whose guest was never created
// is errdefs.ErrConflict.
func (m *Manager) Runtime(ctx context.Context, uuid string) (contract.Backend, contract.Handle, error) {
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
	case "devlxd", "agent", "backend", "daemon", "systemd":
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
func (m *Manager) backendInfo(ctx context.Context, name string) (contract.Backend, *contract.Info, error) {
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

// usableBackend is the optional method of a backend that knows whether
// the host has what it needs (plugins/pluginhost's backends): Usable returns
// an errdefs.ErrUnavailable error naming what is missing and the package
// that provides it, nil when the backend can run guests.
type usableBackend interface {
	Usable(ctx context.Context) error
}

// checkUsable refuses to make or start guests on a backend that reports
// the host lacks something it needs; a backend without Usable passes.
func checkUsable(ctx context.Context, b contract.Backend) error {
	if u, ok := b.(usableBackend); ok {
		return u.Usable(ctx)
	}
	return nil
}

// specWithImage is specOf with the instance's base image, if it has one.
//
// The backend is given the expanded config and devices: the instance's
// profiles, read from the store now (so a profile's change reaches the
// guest at its next start, on any cluster member), under its own keys,
// less what the backend cannot take from a profile (forBackend).
func (m *Manager) specWithImage(ctx context.Context, rec *record.Instance, files []contract.File) (*contract.GuestSpec, error) {
	spec := specOf(rec, files)
	names := rec.Profiles
	if rec.ID != 0 {
		// The stored list, not the cached one: another cluster member may
		// have renamed a profile since this record was loaded.
		if _, ok := m.store.(record.ProfileStore); ok {
			cur, err := m.store.GetInstance(ctx, rec.Name)
			if err != nil {
				return nil, fmt.Errorf("reading the instance's profiles: %w", storeErr(err))
			}
			names = cur.Profiles
		}
	}
	if len(names) > 0 {
		profs, err := m.loadProfiles(ctx, names)
		if err != nil {
			return nil, fmt.Errorf("the instance's profiles: %w", err)
		}
		_, info, err := m.backendInfo(ctx, rec.Backend)
		if err != nil {
			return nil, err
		}
		cfg, devs := m.forBackend(rec, profs, info)
		spec.Config = cfg
		spec.Devices = make(map[string]contract.Device, len(devs))
		for k, v := range devs {
			spec.Devices[k] = contract.Device(v)
		}
	}
	fp := rec.Config[KeyBaseImage]
	if fp == "" {
		return spec, nil
	}
	if m.images == nil {
		return nil, fmt.Errorf("the instance boots from image %s but the daemon has no image store: %w", fp, errdefs.ErrUnavailable)
	}
	im, err := m.images.Spec(ctx, fp)
	if err != nil {
		return nil, fmt.Errorf("the instance's image %s: %w", fp, err)
	}
	spec.Image = im
	return spec, nil
}

// spec builds the GuestSpec of an instance's stored state.
func specOf(rec *record.Instance, files []contract.File) *contract.GuestSpec {
	devs := make(map[string]contract.Device, len(rec.Devices))
	for k, v := range rec.Devices {
		devs[k] = contract.Device(maps.Clone(v))
	}
	return &contract.GuestSpec{
		Name:    rec.Name,
		UUID:    rec.UUID,
		Config:  maps.Clone(rec.Config),
		Devices: devs,
		Files:   files,
	}
}
