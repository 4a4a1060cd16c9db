package instance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// SetReady sets the Ready flag of the running instance with the given uuid
// (the guest's devlxd PATCH /1.0 without a reason): Declare with
// DeclaredReady or DeclaredStarted.
func (m *Manager) SetReady(ctx context.Context, uuid string, ready bool, by events.Requestor) error {
	d := Declaration{State: DeclaredStarted}
	if ready {
		d.State = DeclaredReady
	}
	return m.Declare(ctx, uuid, d, by)
}

// Declare records what the guest of the running instance with the given
// uuid declares of itself (devlxd PATCH /1.0): Ready stores
// volatile.last_state.ready=true, records it in the timeline and publishes
// instance-ready every time, repeats included; the first Ready of a boot
// sets ReadyAt. Started and Degraded store "false" and publish
// instance-unready only when the flag was true (never instance-ready).
// The declaration's reason and message show in the instance's conditions
// (Degraded=True for Degraded). An instance that does not run is
// errdefs.ErrConflict, an unknown state errdefs.ErrInvalid. An empty
// requestor protocol is "devlxd".
func (m *Manager) Declare(ctx context.Context, uuid string, d Declaration, by events.Requestor) error {
	switch d.State {
	case DeclaredReady, DeclaredStarted, DeclaredDegraded:
	default:
		return fmt.Errorf("declaring the state of instance %s: unknown state %q: %w", uuid, d.State, errdefs.ErrInvalid)
	}
	ready := d.State == DeclaredReady
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return fmt.Errorf("setting ready state: %w", err)
	}
	if by.Protocol == "" {
		by.Protocol = "devlxd"
	}
	var name string
	restore := d.Restore
	d.Restore = false
	_, err = m.mutate(ctx, e, func(c *change) error {
		name = c.rec.Name
		if c.rec.PowerState != status.PowerRunning {
			return fmt.Errorf("instance is not running: %w", errdefs.ErrConflict)
		}
		if restore && c.rec.Config[KeyReady] != "" {
			return errDeclaredMeanwhile
		}
		c.rt.declared = d
		old := c.rec.Config[KeyReady] // "" right after a daemon start
		if ready {
			// Ready, late or not: readiness.timeout no longer says what
			// the guest is, and a later probe failure must read as one.
			c.rt.readyTimedOut = false
			if old != "true" {
				c.rec.Config[KeyReady] = "true"
				c.persist = true
				t := c.now
				if old == "" {
					// The agent re-declares Ready to a restarted daemon:
					// keep when this boot really became Ready.
					t = m.readySince(ctx, c.rec, t)
				}
				c.rt.readyAt = &t
			}
			c.note(kindReady, old, "true", causeOf(by), d.Reason)
			c.emit(events.InstanceReady, declContext(d), by)
			return nil
		}
		if old == "" && c.rt.readyAt == nil {
			// The first declaration to a restarted daemon says not Ready
			// (a probe that fails): a boot that was Ready before the
			// restart must not be marked not Ready in time.
			if t := m.readySince(ctx, c.rec, time.Time{}); !t.IsZero() {
				c.rt.readyAt = &t
			}
		}
		if old != "false" {
			c.rec.Config[KeyReady] = "false"
			c.persist = true
		}
		if old == "true" {
			detail := d.Reason
			if d.State == DeclaredDegraded {
				detail = strings.TrimSuffix("degraded: "+d.Reason, ": ")
			}
			c.note(kindReady, "true", "false", causeOf(by), detail)
			c.emit(events.InstanceUnready, declContext(d), by)
		}
		return nil
	})
	if errors.Is(err, errDeclaredMeanwhile) {
		return nil // the guest's own, newer declaration stands
	}
	if err != nil {
		if name == "" {
			return fmt.Errorf("setting ready state of instance %s: %w", uuid, err)
		}
		return fmt.Errorf("setting ready state of instance %q: %w", name, err)
	}
	return nil
}

// errDeclaredMeanwhile ends a restoring Declare whose boot got a
// declaration meanwhile: nothing is changed.
var errDeclaredMeanwhile = errors.New("the boot has a declaration")

// declContext is the event context of a declaration: nil without a
// reason or message (the events LXD clients know stay as they were).
func declContext(d Declaration) map[string]any {
	if d.Reason == "" && d.Message == "" && d.State != DeclaredDegraded {
		return nil
	}
	ctx := map[string]any{"state": d.State}
	if d.Reason != "" {
		ctx["reason"] = d.Reason
	}
	if d.Message != "" {
		ctx["message"] = d.Message
	}
	return ctx
}

// readySince returns when the current boot of rec last became Ready
// according to its timeline (a false -> true entry), or def.
func (m *Manager) readySince(ctx context.Context, rec *record.Instance, def time.Time) time.Time {
	at, ok, err := m.store.LastBecameReady(ctx, rec.ID, rec.Boot)
	if err != nil {
		m.log.Warn("reading timeline", "instance", rec.Name, "err", err)
		return def
	}
	if !ok {
		return def
	}
	return at
}

// agentActions maps agent states to their lifecycle actions.
var agentActions = map[AgentState]string{
	AgentStarted:   events.InstanceAgentStarted,
	AgentConnected: events.InstanceAgentConnected,
	AgentStopped:   events.InstanceAgentStopped,
	AgentLost:      events.InstanceAgentLost,
}

// SetAgentState records what the agent monitor knows of the agent of the
// instance with the given uuid. A changed state is recorded in memory, in
// the timeline (kind "agent") and published as instance-agent-<state>; a
// zero heartbeat leaves the last heartbeat as it is, and a heartbeat alone
// only updates memory. An unknown state is errdefs.ErrInvalid; a state
// other than AgentNone for an instance whose guest does not run is
// errdefs.ErrConflict.
func (m *Manager) SetAgentState(ctx context.Context, uuid string, st AgentState, heartbeat time.Time) error {
	if _, ok := agentActions[st]; !ok && st != AgentNone {
		return fmt.Errorf("setting agent state of instance %s: unknown state %q: %w", uuid, st, errdefs.ErrInvalid)
	}
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return fmt.Errorf("setting agent state: %w", err)
	}
	if m.heartbeatOnly(e, st, heartbeat) {
		return nil
	}
	var name string
	_, err = m.mutate(ctx, e, func(c *change) error {
		name = c.rec.Name
		if agentStateRefused(st, c.rec.PowerState, c.rt.op) {
			return fmt.Errorf("instance is not running: %w", errdefs.ErrConflict)
		}
		if !heartbeat.IsZero() {
			hb := heartbeat.UTC()
			c.rt.agent.LastHeartbeat = &hb
		}
		if c.rt.agent.State == st {
			return nil
		}
		from := c.rt.agent.State
		c.rt.agent.State = st
		since := c.now
		c.rt.agent.Since = &since
		c.note(kindAgent, string(from), string(st), "agent", "")
		if action, ok := agentActions[st]; ok {
			c.emit(action, map[string]any{"state": string(st)}, events.Requestor{Protocol: "agent"})
		}
		return nil
	})
	if err != nil {
		if name == "" {
			return fmt.Errorf("setting agent state of instance %s: %w", uuid, err)
		}
		return fmt.Errorf("setting agent state of instance %q: %w", name, err)
	}
	return nil
}

// RecordHeartbeat records a heartbeat of an agent whose state does not
// change, without a context: it only stores the heartbeat's time in
// memory, as SetAgentState's own shortcut does. It reports false, having
// done nothing, when the call needs SetAgentState (a new state, a refusal,
// an instance not loaded or unknown). The agent monitor calls it first at
// every heartbeat.
func (m *Manager) RecordHeartbeat(uuid string, st AgentState, heartbeat time.Time) bool {
	if heartbeat.IsZero() || !m.loaded.Load() {
		return false
	}
	m.mu.RLock()
	e, ok := m.byUUID[uuid]
	m.mu.RUnlock()
	return ok && m.heartbeatOnly(e, st, heartbeat)
}

// agentStateRefused reports whether an agent state other than none is
// refused: the instance is neither running nor being started or stopped.
func agentStateRefused(st AgentState, power, op string) bool {
	return st != AgentNone && power != status.PowerRunning && op == status.OpNone
}

// heartbeatOnly records a heartbeat that does not change the agent state
// (every 5 s of every running guest's life) without a whole change: no
// copy of the instance, no conditions, no view, nothing persisted or
// published; it reports false when the call is more than that (a new
// state, a refusal, a first heartbeat) and must go through mutate. It
// takes Manager.mu's read lock only, never e.mu (see entry.beat): a
// change of the instance in flight (its store write) does not hold it up.
// A change that commits meanwhile keeps it: views show the later of the
// change's heartbeat and this one. The view's version stays: only the
// heartbeat's time moved (ListCachedFunc).
func (m *Manager) heartbeatOnly(e *entry, st AgentState, heartbeat time.Time) bool {
	m.mu.RLock()
	ok := !e.rt.deleted && e.rt.agent.State == st &&
		!agentStateRefused(st, e.rec.PowerState, e.rt.op) && // else mutate says why
		(heartbeat.IsZero() || e.rt.agent.LastHeartbeat != nil) // a first one goes through mutate
	m.mu.RUnlock()
	if !ok || heartbeat.IsZero() {
		return ok
	}
	hb := heartbeat.UTC()
	for {
		old := e.beat.Load()
		if old != nil && !hb.After(*old) {
			return true // a later one is recorded already
		}
		if e.beat.CompareAndSwap(old, &hb) {
			return true
		}
	}
}

// HandleBackendEvent handles an event of a backend's guest; wire it as
// plugins/pluginhost's OnEvent. EventExited marks the guest Stopped, or
// Error when the backend says it crashed (contract.ExitCrash; see guestExited),
// clears Ready and the agent, publishes instance-stopped and calls
// Hooks.GuestStopped; EventReset clears Ready and calls Hooks.GuestReset;
// other events of running guests go to Hooks.BackendEvent. Events for
// unknown guests are dropped.
//
// The events of every heartbeat (ring data, issue 28) take the short way:
// once the instances are loaded the lookup is a map read, so no context
// (and no timer) is made for them, and the hook gets the entry's cached
// identity (identityOf): no allocation in the manager per heartbeat
// (BenchmarkBackendEventHeartbeat). Only the events that write (an exit,
// a reset) or a lookup that must load the store get eventTimeout.
func (m *Manager) HandleBackendEvent(backend string, ev contract.Event) {
	var e *entry
	var err error
	if m.loaded.Load() {
		e, err = m.lookupUUID(context.Background(), ev.UUID) // a map read: no I/O
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
		e, err = m.lookupUUID(ctx, ev.UUID)
		cancel()
	}
	if err != nil {
		m.log.Debug("dropping a backend event", "backend", backend, "kind", ev.Kind.String(), "err", err)
		return
	}
	m.mu.RLock()
	owner := e.rec.Backend
	m.mu.RUnlock()
	if owner != backend {
		m.log.Warn("dropping a backend event for another backend's guest", "backend", backend, "owner", owner, "uuid", ev.UUID)
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	switch ev.Kind {
	case contract.EventExited, contract.EventReset:
		ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
		defer cancel()
		if ev.Kind == contract.EventExited {
			m.guestExited(ctx, e, ev)
		} else {
			m.guestReset(ctx, e, ev)
		}
	case contract.EventRingData, contract.EventPortOpened, contract.EventPortClosed:
		m.backendEventHint(e, ev)
	default:
		if ev.Kind == contract.EventError {
			m.log.Warn("backend reports a guest failure", "backend", backend, "uuid", ev.UUID, "detail", ev.Detail)
		}
		m.notify(e, whenRunning, func(h Hooks, inst *Instance) { h.BackendEvent(inst, ev) })
	}
}

// backendEventHint calls Hooks.BackendEvent with e's identity for an event
// that hints at new ring words (ring data, a port opened or closed), as
// notify would, with the identity instead of a full view and without a
// closure: it runs at every heartbeat.
func (m *Manager) backendEventHint(e *entry, ev contract.Event) {
	if m.hooks == nil {
		return
	}
	e.hook.Lock()
	defer e.hook.Unlock()
	m.mu.RLock()
	ok := !e.rt.deleted && whenRunning(e)
	inst := identityOf(e)
	m.mu.RUnlock()
	if ok {
		m.hooks.BackendEvent(inst, ev)
	}
}

// exitName is the "exit" of an instance-stopped event's context: how the
// guest ended, "poweroff" (an unclassified exit included) or "crash".
func exitName(k contract.ExitKind) string {
	if k == contract.ExitCrash {
		return contract.ExitCrash.String()
	}
	return contract.ExitPoweroff.String()
}

// guestExited handles the end of e's guest process: Stopped when the
// guest powered itself off (contract.ExitPoweroff, or an exit the backend did
// not classify), Error when it crashed (contract.ExitCrash), whatever the
// exit's detail, which is kept (the timeline entry; for a crash, the
// instance's error). During an operation the exit is kept for the
// operation to look at when it ends.
func (m *Manager) guestExited(ctx context.Context, e *entry, ev contract.Event) {
	m.mu.RLock()
	idle := e.rt.op == status.OpNone
	m.mu.RUnlock()
	if idle {
		// (An exit during an operation is the operation's: a stop takes
		// in the last words itself.)
		m.guestExiting(ctx, e)
	}
	handled := false
	_, err := m.mutate(ctx, e, func(c *change) error {
		if c.rt.op != status.OpNone {
			c.rt.pendingExit = &ev
			return nil
		}
		if c.rec.PowerState != status.PowerRunning {
			return nil
		}
		if c.rec.StartedAt != nil && ev.Time.Before(*c.rec.StartedAt) {
			return nil // an exit of an earlier boot
		}
		crashed := ev.Exit == contract.ExitCrash
		ctxMap := map[string]any{"exit": exitName(ev.Exit)}
		if crashed {
			msg, detail := "the guest crashed", ""
			if ev.Detail != "" {
				msg, detail = ev.Detail, "guest crashed"
			}
			m.stopped(c, status.PowerError, msg, "backend", detail)
			ctxMap["error"] = msg
		} else {
			m.stopped(c, status.PowerStopped, "", "backend", strings.TrimSuffix("guest powered off: "+ev.Detail, ": "))
			if ev.Detail != "" {
				ctxMap["detail"] = ev.Detail
			}
		}
		c.emit(events.InstanceStopped, ctxMap, byBackend)
		handled = true
		return nil
	})
	if err != nil {
		m.log.Error("recording a guest exit", "uuid", ev.UUID, "err", err)
		return
	}
	if handled {
		m.notify(e, always, func(h Hooks, inst *Instance) { h.GuestStopped(inst) })
	}
}

// guestExiting lets the hooks take in a running guest's last ring words
// (ExitHooks) before its end is recorded, within ExitingTimeout.
func (m *Manager) guestExiting(ctx context.Context, e *entry) {
	xh, ok := m.hooks.(ExitHooks)
	if !ok {
		return
	}
	m.mu.RLock()
	running := !e.rt.deleted && e.rec.PowerState == status.PowerRunning
	inst := identityOf(e)
	m.mu.RUnlock()
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ExitingTimeout)
	defer cancel()
	xh.GuestExiting(ctx, inst)
}

// guestReset handles a reboot of e's guest that kept its process: Ready
// is cleared and Hooks.GuestReset called for every one; its timeline entry
// draws from the guest's state budget (budgetReset), so a guest rebooting
// in a loop cannot flood the store.
func (m *Manager) guestReset(ctx context.Context, e *entry, ev contract.Event) {
	handled := false
	_, err := m.mutate(ctx, e, func(c *change) error {
		if c.rec.PowerState != status.PowerRunning {
			return nil
		}
		if c.setReadyFalse("backend", "guest rebooted") {
			c.emit(events.InstanceUnready, map[string]any{"reason": "reset"}, byBackend)
		}
		handled = true
		if !m.budgetReset(c) {
			return nil
		}
		detail := "guest rebooted"
		if n := c.rt.resetsDropped; n > 0 {
			detail = fmt.Sprintf("guest rebooted (and %d more times over budget, not recorded)", n)
			c.rt.resetsDropped = 0
		}
		c.note(kindState, status.PowerRunning, status.PowerRunning, "backend", detail)
		return nil
	})
	if err != nil {
		m.log.Error("recording a guest reset", "uuid", ev.UUID, "err", err)
		return
	}
	if handled {
		m.notify(e, whenRunning, func(h Hooks, inst *Instance) { h.GuestReset(inst) })
	}
}

// opRecovering marks an instance whose guest Recover is re-attaching to; it
// does not change the status.
const opRecovering = "recovering"

// Init is called once at daemon start, after the backend plugins started:
// Load, then RecoverAll. Only a store failure is an error: a guest that
// cannot be recovered is logged (and its instance marked Error when its
// backend is missing), so one broken guest never keeps the daemon down.
func (m *Manager) Init(ctx context.Context) error {
	if err := m.Load(ctx); err != nil {
		return err
	}
	m.RecoverAll(ctx, nil)
	return nil
}

// Load is the first half of Init: it clears every instance's Ready flag
// (the daemon cannot know; agents re-declare it) and loads the instances.
// Each instance with a guest is then unrecovered until RecoverAll reaches
// it: its view's status is Unknown (StatusReason ReasonRecovering) and
// its operations (start, stop, delete, ...) wait for its recovery. The
// daemon serves the admin API between the two, so that it answers with
// what it knows while it recovers.
func (m *Manager) Load(ctx context.Context) error {
	n, err := m.store.ClearReadyAt(ctx, m.location)
	if err != nil {
		return fmt.Errorf("initialising instances: %w", storeErr(err))
	}
	if err := m.ensureDefaultProfile(ctx); err != nil { // profiles.go
		return fmt.Errorf("initialising instances: %w", err)
	}
	if err := m.load(ctx, true); err != nil {
		return fmt.Errorf("initialising instances: %w", err)
	}
	m.mu.Lock()
	held := 0
	for _, e := range m.byName {
		e.rt.readyAt = nil
		e.changedLocked()
		if len(e.rec.Handle) > 0 && !e.recoveryHeld.Load() {
			e.op.Lock() // released by RecoverAll's worker (releaseRecovery)
			e.recoveryHeld.Store(true)
			e.rt.unrecovered = true
			held++
		}
	}
	m.mu.Unlock()
	m.log.Info("instances loaded", "instances", len(m.byName), "ready_cleared", n, "to_recover", held)
	return nil
}

// RecoverAll is the second half of Init: it recovers the guests Load held,
// of every backend, through one pool of at most recoverWorkers (see
// Recover), so that neither a slow guest nor a slow backend holds the
// others back, and ends the unrecovered state of every instance Load left
// so, recovered or not (an ended ctx, the daemon stopping, leaves them as
// stored). dispatched, when not nil, is called once every guest has been
// handed to a worker: at most recoverWorkers are then still recovering.
func (m *Manager) RecoverAll(ctx context.Context, dispatched func()) {
	if err := m.load(ctx, false); err != nil {
		m.log.Error("recovering guests", "err", err)
	}
	byBackend := map[string][]*entry{}
	m.mu.RLock()
	for _, e := range m.byName {
		// Only the guests Load held (an instance created since is the
		// API's, not the recovery's).
		if e.recoveryHeld.Load() {
			byBackend[e.rec.Backend] = append(byBackend[e.rec.Backend], e)
		}
	}
	m.mu.RUnlock()
	type job struct {
		name string
		b    contract.Backend
		e    *entry
	}
	var jobs []job
	for _, name := range slices.Sorted(maps.Keys(byBackend)) {
		m.infoMu.Lock()
		delete(m.infos, name)
		m.infoMu.Unlock()
		b, err := m.backends.Backend(name)
		if err != nil {
			err = fmt.Errorf("recovering guests of backend %q: %w", name, err)
			m.log.Error("recovering guests", "backend", name, "err", err)
			for _, e := range byBackend[name] {
				m.backendMissing(ctx, e, err, true)
			}
			continue
		}
		for _, e := range byBackend[name] {
			jobs = append(jobs, job{name, b, e})
		}
	}
	var wg sync.WaitGroup
	work := make(chan job)
	for range min(recoverWorkers, len(jobs)) {
		wg.Go(func() {
			for j := range work {
				if err := m.recoverOne(ctx, j.b, j.e, true); err != nil {
					m.log.Error("recovering guests", "backend", j.name, "err", err)
				}
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	if dispatched != nil {
		dispatched()
	}
	wg.Wait()
	var left []*entry
	m.mu.RLock()
	for _, e := range m.byName {
		if e.rt.unrecovered || e.recoveryHeld.Load() {
			left = append(left, e)
		}
	}
	m.mu.RUnlock()
	for _, e := range left {
		m.endRecovery(ctx, e)
		m.releaseRecovery(e)
	}
}

// endRecovery ends e's unrecovered state (memory only).
func (m *Manager) endRecovery(ctx context.Context, e *entry) {
	if _, err := m.mutate(context.WithoutCancel(ctx), e, func(c *change) error {
		c.rt.unrecovered = false
		return nil
	}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Error("ending a recovery", "instance", e.name, "err", err)
	}
}

// releaseRecovery releases e's operation lock if Load took it.
func (m *Manager) releaseRecovery(e *entry) {
	if e.recoveryHeld.CompareAndSwap(true, false) {
		e.op.Unlock()
	}
}

// Recovering returns how many instances the daemon has not yet recovered
// since it started.
func (m *Manager) Recovering() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, e := range m.byName {
		if e.rt.unrecovered {
			n++
		}
	}
	return n
}

// Recover re-attaches to every guest of a backend after the daemon or the
// backend's plugin restarted (wire it as plugins/pluginhost's OnRestart). It
// calls the backend's Recover for each stored handle and reconciles the
// power state: a guest that ended meanwhile is marked stopped (timeline
// cause "daemon") and instance-stopped is published; running guests get
// Hooks.GuestRunning so the agent monitor advertises itself again and the
// agent re-declares Ready. Guests are recovered in parallel; their errors
// are returned joined.
func (m *Manager) Recover(ctx context.Context, backend string) error {
	if err := m.load(ctx, false); err != nil {
		return fmt.Errorf("recovering guests of backend %q: %w", backend, err)
	}
	m.infoMu.Lock()
	delete(m.infos, backend)
	m.infoMu.Unlock()
	var todo []*entry
	m.mu.RLock()
	for _, e := range m.byName {
		if e.rec.Backend == backend {
			todo = append(todo, e)
		}
	}
	m.mu.RUnlock()
	if len(todo) == 0 {
		return nil
	}
	b, err := m.backends.Backend(backend)
	if err != nil {
		err = fmt.Errorf("recovering guests of backend %q: %w", backend, err)
		for _, e := range todo {
			m.backendMissing(ctx, e, err, false)
		}
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		work = make(chan *entry)
	)
	for range min(recoverWorkers, len(todo)) {
		wg.Go(func() {
			for e := range work {
				if err := m.recoverOne(ctx, b, e, false); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, e := range todo {
		work <- e
	}
	close(work)
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// backendMissing marks a running instance whose backend cannot be reached
// at all as Error: nothing can tell whether its guest still runs. A later
// Recover (the plugin is back) finds the truth again.
func (m *Manager) backendMissing(ctx context.Context, e *entry, cause error, atStart bool) {
	m.lockForRecovery(e, atStart)
	defer m.unlockForRecovery(e, atStart)
	_, err := m.mutate(ctx, e, func(c *change) error {
		c.rt.unrecovered = false
		if c.rec.PowerState != status.PowerRunning {
			return nil
		}
		m.stopped(c, status.PowerError, cause.Error(), "daemon", "backend unavailable")
		c.emit(events.InstanceError, map[string]any{"error": cause.Error()}, byDaemon)
		return nil
	})
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Error("marking an instance without backend", "err", err)
	}
}

// lockForRecovery takes e's operation lock for a recovery, unless it is
// the start-up recovery's (atStart), whose lock Load took.
func (m *Manager) lockForRecovery(e *entry, atStart bool) {
	if !atStart {
		e.op.Lock()
	}
}

// unlockForRecovery releases what lockForRecovery took, or the start-up
// recovery's lock.
func (m *Manager) unlockForRecovery(e *entry, atStart bool) {
	if atStart {
		m.releaseRecovery(e)
		return
	}
	e.op.Unlock()
}

// recoverOne recovers one guest; atStart says it is RecoverAll's: the entry's
// lock is the one Load took, released once it is recovered.
func (m *Manager) recoverOne(ctx context.Context, b contract.Backend, e *entry, atStart bool) error {
	m.lockForRecovery(e, atStart)
	defer m.unlockForRecovery(e, atStart)
	rec, _, err := m.snapshot(e)
	if err != nil || len(rec.Handle) == 0 {
		return nil // deleted meanwhile, or never created
	}
	// While the backend answers, an exit is kept for the end (as during
	// start and stop), so it cannot interleave with the reconciliation.
	if err := m.setOp(ctx, e, opRecovering); err != nil {
		return fmt.Errorf("recovering instance %q: %w", rec.Name, err)
	}
	var pending *contract.Event
	defer func() {
		if _, err := m.mutate(context.WithoutCancel(ctx), e, func(c *change) error {
			c.rt.unrecovered = false
			if c.rt.op == opRecovering {
				c.rt.op = status.OpNone
			}
			pending, c.rt.pendingExit = c.rt.pendingExit, nil
			return nil
		}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Error("ending a recovery", "instance", rec.Name, "err", err)
		}
		if pending != nil {
			m.guestExited(context.WithoutCancel(ctx), e, *pending)
		}
	}()
	spec, err := m.specWithImage(ctx, rec, nil)
	if err != nil {
		m.log.Warn("recovering a guest without its image", "instance", rec.Name, "err", err)
		spec = specOf(rec, nil)
	}
	h2, gs, err := b.Recover(ctx, rec.Handle, spec)
	switch {
	case err == nil && gs != nil:
	case err == nil || isNotFound(err):
		gs = &contract.GuestState{Status: contract.StatusStopped}
	default:
		return fmt.Errorf("recovering instance %q: %w", rec.Name, err)
	}
	power := powerOf(gs.Status, rec.PowerState)
	wasRunning := rec.PowerState == status.PowerRunning
	view, err := m.mutate(ctx, e, func(c *change) error {
		if len(h2) > 0 && !bytes.Equal(h2, c.rec.Handle) {
			c.rec.Handle = slices.Clone(h2)
			c.persist = true
		}
		switch {
		case power == status.PowerRunning:
			c.rt.details = maps.Clone(gs.Details)
			if !wasRunning {
				c.rec.PowerState = status.PowerRunning
				c.persist = true
				c.note(kindState, rec.PowerState, status.PowerRunning, "daemon", "guest found running")
				c.emit(events.InstanceStarted, nil, byDaemon)
			}
		case wasRunning:
			m.stopped(c, power, gs.Message, "daemon", "guest ended while the daemon or its plugin was down")
			c.emit(events.InstanceStopped, nil, byDaemon)
		case power != c.rec.PowerState:
			from := c.rec.PowerState
			c.rec.PowerState = power
			c.persist = true
			c.note(kindState, from, power, "daemon", gs.Message)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recovering instance %q: %w", rec.Name, err)
	}
	if power != status.PowerRunning {
		if wasRunning {
			m.notify(e, always, func(h Hooks, inst *Instance) { h.GuestStopped(inst) })
		}
		return nil
	}
	h := rec.Handle
	if len(h2) > 0 {
		h = h2
	}
	ep, err := b.LinkEndpoint(ctx, h)
	if err != nil {
		m.log.Warn("guest link endpoint unknown", "instance", rec.Name, "err", err)
		ep = nil
	} else if ep != nil {
		if v, err := m.mutate(ctx, e, func(c *change) error {
			c.rt.link = string(ep.Kind)
			return nil
		}); err == nil {
			view = v
		}
	}
	m.notify(e, bootRunning(view.Boot), func(h Hooks, inst *Instance) { h.GuestRunning(inst, ep) })
	return nil
}

// TimelineEntry is one entry of an instance's timeline as the API shows it.
type TimelineEntry struct {
	Time   time.Time
	Boot   int64
	Kind   string // "state", "agent", "ready", "exec", "file"
	From   string
	To     string
	Cause  string // "api", "devlxd", "backend", "daemon", "agent"
	Detail string
}

// Timeline limits.
const (
	DefaultTimelineLimit = 100
	MaxTimelineLimit     = 10000
)

// Timeline returns the last limit entries of an instance's timeline, oldest
// first (limit <= 0 means DefaultTimelineLimit; at most MaxTimelineLimit).
func (m *Manager) Timeline(ctx context.Context, name string, limit int) ([]TimelineEntry, error) {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading timeline: %w", err)
	}
	if limit <= 0 {
		limit = DefaultTimelineLimit
	}
	limit = min(limit, MaxTimelineLimit)
	m.mu.RLock()
	id := e.rec.ID
	m.mu.RUnlock()
	return m.timelineOf(ctx, name, id, limit)
}

// StoredTimeline is Timeline for an instance this manager does not run (a
// cluster member's view of another member's instance), read from the store.
func (m *Manager) StoredTimeline(ctx context.Context, name string, limit int) ([]TimelineEntry, error) {
	rec, err := m.store.GetInstance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading timeline: %w", storeErr(err))
	}
	if limit <= 0 {
		limit = DefaultTimelineLimit
	}
	return m.timelineOf(ctx, name, rec.ID, min(limit, MaxTimelineLimit))
}

func (m *Manager) timelineOf(ctx context.Context, name string, id int64, limit int) ([]TimelineEntry, error) {
	recs, err := m.store.ListTimeline(ctx, id, limit)
	if err != nil {
		return nil, fmt.Errorf("reading timeline of instance %q: %w", name, storeErr(err))
	}
	out := make([]TimelineEntry, len(recs))
	for i, r := range recs {
		out[i] = TimelineEntry{Time: r.Time, Boot: r.Boot, Kind: r.Kind, From: r.From, To: r.To, Cause: r.Cause, Detail: r.Detail}
	}
	return out, nil
}
