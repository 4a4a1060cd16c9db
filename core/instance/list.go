package instance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
)

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
	err := m.list(ctx, f, listSnapshotOf, func(matched []snapshot) error {
		views := make([]Instance, len(matched)) // one allocation for all views
		out = make([]*Instance, len(matched))
		for i := range matched {
			rt := matched[i].runtime()
			fillView(&views[i], matched[i].rec, &rt, false)
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
// is valid only during its call; fn must not keep or change it (a shallow
// copy of it stays valid, to be read only: the dashboard's pages). fn runs
// without the manager's lock, on a snapshot taken when ListFunc was called:
// a slow listing (thousands of instances, a flood of concurrent lists) never
// holds up state changes, agent updates or timeline writes. An error from fn
// ends the listing and is returned.
func (m *Manager) ListFunc(ctx context.Context, f ListFilter, fn func(*Instance) error) error {
	return m.listRows(ctx, f, true, func(rows []CachedRow) error {
		for i := range rows {
			if err := fn(rows[i].View()); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListBatch is how many rows ListCachedFunc hands over at once.
const ListBatch = 256

// CachedRow is one instance as ListCachedFunc hands it to a lister that
// keeps what it derives from each view between lists (the admin API's
// encoded JSON): the view's change version, the instance's ViewCache and
// what it held for that version, and the few parts of the view such a
// lister reads beside a value it kept. The view itself is built only when
// asked for (View): at 10,000 running guests building every row's view,
// although its encoding was kept, was a fifth of a list's CPU.
type CachedRow struct {
	Name string
	UUID string
	// GuestIPv4 is the view's GuestIPv4 (another member's instance).
	GuestIPv4 string
	// LastHeartbeat is the view's Agent.LastHeartbeat: it moves without
	// a new Version (see ViewCache).
	LastHeartbeat *time.Time
	// Version is the view's change version; Cache the instance's slot,
	// which outlives the call.
	Version uint64
	Cache   *ViewCache
	// Cached is what Cache held for Version when the row was made (nil:
	// nothing), loaded once: a concurrent list may meanwhile store
	// another version's value in Cache, so a lister uses Cached, not a
	// second Load.
	Cached any

	snap  *snapshot // the entry's snapshot, for View; nil with view set
	view  *Instance // the view once built (or given: RowOf)
	views *rowViews // where View builds it: views.v[idx]
	idx   int
}

// rowViews holds the views of a batch of rows, made at the first View of
// the list and reused from batch to batch.
type rowViews struct {
	v []Instance
	m *Manager // for the view of a light snapshot
}

// View returns the row's view, built at the first call: what ListFunc
// hands out, valid only during the call of ListCachedFunc's fn. A row
// whose slot held its version's value (Cached) was listed without its
// runtime: its view is the instance's at the call, which may be of a
// later version than Version.
func (r *CachedRow) View() *Instance {
	if r.view == nil {
		if r.views.v == nil {
			r.views.v = make([]Instance, ListBatch)
		}
		v := &r.views.v[r.idx]
		snap := r.snap
		if snap.cached != nil {
			// A light snapshot (lightSnapshotOf) holds no runtime: the
			// entry's as it is now, of Version or later.
			r.views.m.mu.RLock()
			full := listSnapshotOf(snap.e)
			r.views.m.mu.RUnlock()
			snap = &full
		}
		rt := snap.runtime()
		fillView(v, snap.rec, &rt, true)
		r.view = v
	}
	return r.view
}

// RowOf returns the row of a view that no manager lists, with its version
// and slot: another cluster member's instance (version 0, a slot of its
// own), a test's fixed views.
func RowOf(view *Instance, version uint64, cache *ViewCache) CachedRow {
	return CachedRow{Name: view.Name, UUID: view.UUID, GuestIPv4: view.GuestIPv4, LastHeartbeat: view.Agent.LastHeartbeat,
		Version: version, Cache: cache, Cached: cache.Load(version), view: view}
}

// ListCachedFunc is ListFunc for a lister that keeps what it derives from
// each view between lists (the admin API's encoded JSON): fn gets the rows
// (CachedRow) of the matching instances in name order, at most ListBatch
// at a time, each with its change version and its ViewCache, in which a
// value stored for that version stays valid until the instance changes
// (but for its heartbeat's time: see ViewCache). A row's view is built
// only when the lister asks for it. The rows and views are valid only
// during the call of fn; the caches outlive it. A service that embeds the
// Manager and lists something else in ListFunc must override this method
// too (core/cluster.Instances does): the admin API prefers it to ListFunc.
func (m *Manager) ListCachedFunc(ctx context.Context, f ListFilter, fn func(rows []CachedRow) error) error {
	return m.listRows(ctx, f, false, fn)
}

// listRows hands fn the rows of the entries matching f, in batches. With
// views unset, an entry whose slot holds its version's value is copied
// without what only its view needs (lightSnapshotOf).
func (m *Manager) listRows(ctx context.Context, f ListFilter, views bool, fn func(rows []CachedRow) error) error {
	snapshotOf := listSnapshotOf
	if !views {
		snapshotOf = lightSnapshotOf
	}
	return m.list(ctx, f, snapshotOf, func(matched []snapshot) error {
		rows := make([]CachedRow, min(len(matched), ListBatch))
		rv := &rowViews{m: m}
		for len(matched) > 0 {
			batch := matched[:min(len(matched), len(rows))]
			matched = matched[len(batch):]
			for i := range batch {
				s := &batch[i]
				rows[i] = CachedRow{Name: s.rec.Name, UUID: s.rec.UUID, LastHeartbeat: s.agent.LastHeartbeat,
					Version: s.version, Cache: &s.e.cache, Cached: s.cached, snap: s, views: rv, idx: i}
				if s.cached == nil && !views {
					rows[i].Cached = s.e.cache.Load(s.version)
				}
			}
			if err := fn(rows[:len(batch)]); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshot is an entry's state at one instant: its record and the parts of
// its runtime a view shows are replaced, never changed in place, so the
// copy stays valid without the lock; version is theirs (ListCachedFunc).
// It holds only what fillView reads of the runtime: a list of 10,000 copies
// 10,000 snapshots under the read lock, and the whole runtime was 304 bytes.
type snapshot struct {
	e           *entry
	rec         *record.Instance
	version     uint64
	op          string
	agent       AgentInfo
	link        string
	details     map[string]string
	readyAt     *time.Time
	conds       []Condition
	unrecovered bool
	// cached is what e's slot held for version under the lock, set by
	// lightSnapshotOf only, which then copies nothing a view needs.
	cached any
}

// listSnapshotOf returns e's snapshot; Manager.mu must be held.
func listSnapshotOf(e *entry) snapshot {
	rt := &e.rt
	conds := rt.conds
	if conds == nil { // never after newEntry; derived as a view would
		conds = conditionsOf(e.rec, rt)
	}
	agent := rt.agent
	agent.LastHeartbeat = e.heartbeatOf(agent.LastHeartbeat)
	return snapshot{e: e, rec: e.rec, version: e.version, op: rt.op, agent: agent, link: rt.link,
		details: rt.details, readyAt: rt.readyAt, conds: conds, unrecovered: rt.unrecovered}
}

// lightSnapshotOf returns e's snapshot for a lister of cached values
// (ListCachedFunc): when e's slot holds a value of e's version, only that
// value, the record (for the name and uuid) and the heartbeat, not what
// only a view needs; else listSnapshotOf's. Manager.mu must be held.
func lightSnapshotOf(e *entry) snapshot {
	v := e.cache.Load(e.version)
	if v == nil {
		return listSnapshotOf(e)
	}
	return snapshot{e: e, rec: e.rec, version: e.version, cached: v,
		agent: AgentInfo{LastHeartbeat: e.heartbeatOf(e.rt.agent.LastHeartbeat)}}
}

// runtime returns the runtime fillView reads, from s.
func (s *snapshot) runtime() runtime {
	return runtime{op: s.op, agent: s.agent, link: s.link, details: s.details, readyAt: s.readyAt,
		conds: s.conds, unrecovered: s.unrecovered}
}

// list calls fn with snapshots of the entries matching f, taken under the
// read lock by snapshotOf; fn runs after the lock is released.
func (m *Manager) list(ctx context.Context, f ListFilter, snapshotOf func(*entry) snapshot, fn func([]snapshot) error) error {
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
	matched := getSnapshots(len(m.sorted))
	defer putSnapshots(matched)
	m.mu.RLock()
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
		matched = append(matched, snapshotOf(e))
	}
	m.mu.RUnlock()
	return fn(matched)
}

// snapshotPool keeps the snapshot slices of ended lists for the next ones:
// at 10,000 instances a list's is 1.5 MB, which the runtime cleared at each
// allocation and the collector then scanned.
var snapshotPool sync.Pool

// getSnapshots returns an empty slice of snapshots of capacity n or more.
func getSnapshots(n int) []snapshot {
	if p, ok := snapshotPool.Get().(*[]snapshot); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]snapshot, 0, n)
}

// putSnapshots gives s back, emptied (no entry kept alive by the pool),
// once nothing reads it: list's fn has returned, and neither rows nor
// views point into it then (a view holds copies of its fields).
func putSnapshots(s []snapshot) {
	clear(s)
	s = s[:0]
	snapshotPool.Put(&s)
}
