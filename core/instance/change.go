package instance

import (
	"context"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
)

// change is one read-modify-write of an instance, built by mutate's
// callback: the copies to modify, and what to record and announce.
type change struct {
	rec      *record.Instance
	rt       runtime
	persist  bool // rec changed and must be saved
	timeline []*record.TimelineEntry
	events   []events.Event
	now      time.Time
	quiet    bool // announce no condition change of its own (conditions.go)
}

// note appends a timeline entry.
func (c *change) note(kind, from, to, cause, detail string) {
	c.timeline = append(c.timeline, &record.TimelineEntry{
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
	c.rt.declared = Declaration{}
	c.rt.oom = oomState{} // the boot ended: its kills with it
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
//
// A caller with a deadline (an API request forwarded by another cluster
// member carries its caller's) that passed while it waited for e's lock
// changes nothing either: its caller has been answered already.
func (m *Manager) mutate(ctx context.Context, e *entry, fn func(c *change) error) (*Instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m.mu.RLock()
	if _, ok := ctx.Deadline(); ok && ctx.Err() != nil {
		name := e.rec.Name
		m.mu.RUnlock()
		return nil, fmt.Errorf("instance %q: the request's deadline passed before its change could be made: %w: %w", name, ctx.Err(), errdefs.ErrUnavailable)
	}
	if e.rt.deleted {
		name := e.rec.Name
		m.mu.RUnlock()
		return nil, fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	c := &change{rec: cloneRec(e.rec), rt: e.rt.clone(), now: time.Now().UTC()}
	prevConds := conditionsOf(e.rec, &e.rt)
	stored := e.stored
	m.mu.RUnlock()
	if err := fn(c); err != nil {
		return nil, err
	}
	c.updateConditions(prevConds)
	var staged *events.Staged // the events, written with the record
	if c.persist {
		tl, lost := m.withLost(c.rec.ID, c.now, c.rec.Boot, c.timeline)
		st, cw := m.stage(c.events)
		fw, narrow := m.store.(changeFromWriter)
		err := m.retryWrite(ctx, fmt.Sprintf("saving instance %q", c.rec.Name), func(ctx context.Context) error {
			switch {
			case narrow && st != nil:
				return storeErr(fw.WriteChangeFrom(ctx, stored, c.rec, tl, st.Records()))
			case narrow:
				return storeErr(fw.WriteChangeFrom(ctx, stored, c.rec, tl, nil))
			case st != nil:
				return storeErr(cw.WriteChange(ctx, c.rec, tl, st.Records()))
			}
			return storeErr(m.store.UpdateInstanceWithTimeline(ctx, c.rec, tl...))
		})
		if err != nil {
			if st != nil {
				st.Abort()
			}
			return nil, err
		}
		m.reportedLost(c.rec.ID, lost)
		staged = st
	}
	m.mu.Lock()
	e.rec, e.rt = c.rec, c.rt
	if c.persist {
		e.stored = c.rec
	}
	e.changedLocked()
	view := viewOf(e)
	m.wakeLocked(e)
	m.mu.Unlock()
	m.armReadyTimer(e, c.rec, &c.rt)
	switch {
	case staged != nil:
		// Delivered once the change is made in memory: a watcher that
		// reads the instance when an event arrives finds it changed.
		staged.Deliver()
	case c.persist:
		m.publish(ctx, c.events)
	default:
		// The timeline before (or with) the events, so that a watcher
		// that reads the timeline when an event arrives finds the entry.
		m.recordNotPersisted(ctx, c)
	}
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
	m.notifyWith(e, cond, viewOf, call)
}

// identityOf is the instance of e with its identity only (under
// Manager.mu, read or write). It is made once and kept in e.ident while the
// record's UUID and backend stay the same: the hooks that get it are
// called at every heartbeat and must not change it.
func identityOf(e *entry) *Instance {
	if id := e.ident.Load(); id != nil && id.UUID == e.rec.UUID && id.Backend == e.rec.Backend && id.Name == e.rec.Name {
		return id
	}
	id := &Instance{Name: e.rec.Name, UUID: e.rec.UUID, Backend: e.rec.Backend}
	e.ident.Store(id)
	return id
}

// notifyWith is notify with the instance that view makes of e (under
// Manager.mu).
func (m *Manager) notifyWith(e *entry, cond func(*entry) bool, view func(*entry) *Instance, call func(h Hooks, inst *Instance)) {
	if m.hooks == nil {
		return
	}
	e.hook.Lock()
	defer e.hook.Unlock()
	m.mu.RLock()
	ok := !e.rt.deleted && cond(e)
	inst := view(e)
	m.mu.RUnlock()
	if ok {
		call(m.hooks, inst)
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
