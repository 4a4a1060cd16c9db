package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Start starts an instance's guest: errdefs.ErrConflict if it runs. The
// status is Starting meanwhile. It passes the config, devices and the
// files of FilesProvider to the backend, creating the guest first if it
// has none. A started guest is never Ready (a fresh boot declares it
// again); the boot counter goes up, instance-started is published, and the
// hooks learn the guest's link endpoint. A failed start leaves the
// instance Stopped (bad input) or Error with the message, in the timeline
// and an instance-error event.
// A guest whose state a stateful stop saved is restored from it.
func (m *Manager) Start(ctx context.Context, name string, by events.Requestor) error {
	return m.StartWith(ctx, name, StartOptions{}, by)
}

// StartOptions says how to start a guest.
type StartOptions struct {
	// Stateless boots the guest afresh even when a stateful stop saved its
	// state; the backend discards that state. It is the way out when a
	// saved state cannot be restored (say, saved under another serial
	// layout).
	Stateless bool
}

// StartWith is Start with options.
func (m *Manager) StartWith(ctx context.Context, name string, opts StartOptions, by events.Requestor) error {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("starting instance %q: %w", name, err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	if err := m.start(ctx, e, opts, by, events.InstanceStarted); err != nil {
		return fmt.Errorf("starting instance %q: %w", name, err)
	}
	return nil
}

// startStep is one named step of starting a guest.
type startStep struct {
	name string
	run  func(m *Manager, r *startRun) error
}

// startSteps is the start pipeline, in order. A step that fails before the
// guest runs ends the operation through failStart (Stopped or Error,
// with the message in the timeline and an instance-error event); a step
// that sets startRun.done ends the pipeline early without an error (the
// guest did not stay up, and recordStart has said so).
var startSteps = []startStep{
	{"resolve backend", (*Manager).startBackend},
	{"prepare guest files", (*Manager).startFiles},
	{"create guest", (*Manager).startCreate},
	{"check saved state", (*Manager).startSavedState},
	{"boot guest", (*Manager).startBoot},
	{"record start", (*Manager).startRecord},
	{"record link", (*Manager).startLink},
	{"notify hooks", (*Manager).startNotify},
}

// startRun is the state of one start, passed from step to step.
type startRun struct {
	ctx    context.Context
	e      *entry
	opts   StartOptions
	by     events.Requestor
	action string // the event published on success

	rec     *record.Instance    // the instance as the start began
	b       contract.Backend    // its backend
	info    *contract.Info      // the backend's Info
	files   []contract.File     // files of FilesProvider for the guest
	spec    *contract.GuestSpec // what the backend is asked to start
	h       contract.Handle     // the guest's handle, new after Create or Start
	startAt time.Time           // when the backend was asked to start the guest
	gs      *contract.GuestState
	pending *contract.Event // an exit that arrived while the start ran
	view    *Instance       // the instance once the start was recorded
	ep      *contract.LinkEndpoint
	done    bool // the pipeline ends early, successfully
}

// start starts e's guest; e.op is held. action is the event published on
// success. It runs startSteps in order.
func (m *Manager) start(ctx context.Context, e *entry, opts StartOptions, by events.Requestor, action string) error {
	rec, _, err := m.snapshot(e)
	if err != nil {
		return err
	}
	if rec.PowerState == status.PowerRunning {
		return fmt.Errorf("already running: %w", errdefs.ErrConflict)
	}
	if err := m.setOp(ctx, e, status.OpStarting); err != nil {
		return err
	}
	r := &startRun{ctx: ctx, e: e, opts: opts, by: by, action: action, rec: rec}
	for _, s := range startSteps {
		t0 := time.Now()
		err := s.run(m, r)
		m.log.Debug("instance start step", "instance", rec.Name, "step", s.name, "took", time.Since(t0), "err", err)
		if err != nil {
			return err
		}
		if r.done {
			return nil
		}
	}
	return nil
}

// failStart ends the operation: the guest did not start. guestFailed makes the
// instance Error; otherwise (bad input, backend gone) it keeps its power
// state. It returns err.
func (m *Manager) failStart(r *startRun, err error, guestFailed bool) error {
	rec := r.rec
	to := rec.PowerState
	if guestFailed {
		to = status.PowerError
	}
	_, merr := m.mutate(context.WithoutCancel(r.ctx), r.e, func(c *change) error {
		c.rt.op = status.OpNone
		c.rt.pendingExit = nil
		if c.rec.PowerState != to {
			c.rec.PowerState = to
			c.persist = true
		}
		if c.rt.details == nil {
			c.rt.details = map[string]string{}
		}
		c.rt.details["error"] = err.Error()
		c.note(kindState, rec.PowerState, to, causeOf(r.by), "start failed: "+err.Error())
		c.emit(events.InstanceError, map[string]any{"error": err.Error(), "operation": "start"}, r.by)
		return nil
	})
	if merr != nil {
		m.log.Error("recording a failed start", "instance", rec.Name, "err", merr)
	}
	return err
}

// startBackend finds the instance's backend and its Info.
func (m *Manager) startBackend(r *startRun) error {
	b, info, err := m.backendInfo(r.ctx, r.rec.Backend)
	if err != nil {
		return m.failStart(r, err, false)
	}
	if err := checkUsable(r.ctx, b); err != nil {
		return m.failStart(r, err, false)
	}
	r.b, r.info = b, info
	return nil
}

// startFiles asks FilesProvider for the guest's files, and builds the spec.
func (m *Manager) startFiles(r *startRun) error {
	if m.files != nil {
		files, err := m.files.GuestFiles(r.ctx, m.view(r.e))
		if err != nil {
			return m.failStart(r, fmt.Errorf("preparing guest files: %w", err), false)
		}
		r.files = files
	}
	spec, err := m.specWithImage(r.ctx, r.rec, r.files)
	if err != nil {
		return m.failStart(r, err, false)
	}
	r.spec = spec
	if err := m.resolveVolumes(r.ctx, r.spec.Devices, false); err != nil { // devices.go: cold-plugged disks
		return m.failStart(r, err, false)
	}
	return nil
}

// startCreate creates the guest when the instance has no handle yet, and
// stores the new handle.
func (m *Manager) startCreate(r *startRun) error {
	r.h = r.rec.Handle
	if len(r.h) > 0 {
		return nil
	}
	h, err := r.b.Create(r.ctx, r.spec)
	if err != nil {
		return m.failStart(r, fmt.Errorf("creating guest: %w", err), false)
	}
	r.h = h
	if _, err := m.mutate(r.ctx, r.e, func(c *change) error {
		c.rec.Handle = slices.Clone(h)
		c.persist = true
		return nil
	}); err != nil {
		return m.failStart(r, err, false)
	}
	return nil
}

// startSavedState asks a stateful backend whether a stateful stop saved
// the guest's state; the guest is then restored from it, unless
// StartOptions.Stateless.
func (m *Manager) startSavedState(r *startRun) error {
	if r.info.Has(contract.CapStateful) && !r.opts.Stateless {
		if st, err := r.b.State(r.ctx, r.h); err == nil && st.HasSavedState {
			r.spec.RestoreState = true
		}
	}
	return nil
}

// startBoot asks the backend to start the guest. Bad input (invalid, not
// supported) leaves the instance as it was; any other failure makes it
// Error.
func (m *Manager) startBoot(r *startRun) error {
	r.startAt = time.Now().UTC()
	h2, gs, err := r.b.Start(r.ctx, r.h, r.spec)
	if err != nil {
		bad := errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, errdefs.ErrNotSupported) ||
			errors.Is(err, contract.ErrInvalid) || errors.Is(err, contract.ErrNotSupported)
		if r.spec.RestoreState && (errors.Is(err, errdefs.ErrConflict) || errors.Is(err, contract.ErrConflict)) {
			// The backend refused the saved state before the guest ran
			// (another serial layout, another link): nothing started, the
			// instance stays as it was, and the way out is named.
			bad = true
			err = fmt.Errorf("%w; `guestlink start --stateless %s` boots it afresh, discarding the saved state", err, r.rec.Name)
		}
		return m.failStart(r, err, !bad)
	}
	if gs == nil {
		gs = &contract.GuestState{Status: contract.StatusRunning}
	}
	if len(h2) > 0 {
		r.h = h2
	}
	r.gs = gs
	return nil
}

// startRecord saves the started guest: handle, power state, boot counter,
// start time, Ready false (or true again for a guest restored from a state
// saved while Ready), and publishes the action. A guest that did not stay
// up is recorded as such and ends the pipeline.
func (m *Manager) startRecord(r *startRun) error {
	spec, gs, by, startAt := r.spec, r.gs, r.by, r.startAt
	view, err := m.mutate(context.WithoutCancel(r.ctx), r.e, func(c *change) error {
		from := c.rec.PowerState
		c.rec.Handle = slices.Clone(r.h)
		c.rec.PowerState = powerOf(gs.Status, status.PowerRunning)
		c.rec.Boot++
		c.rec.StartedAt = &startAt
		c.rec.Config[KeyReady] = "false" // a fresh boot is never Ready
		savedReady := c.rec.Config[KeySavedReady] == "true"
		delete(c.rec.Config, KeySavedReady) // a saved state is used once
		c.persist = true
		c.rt.op = status.OpNone
		c.rt.agent = AgentInfo{}
		c.rt.readyAt = nil
		c.rt.declared = Declaration{}
		c.rt.readyTimedOut = false
		c.rt.link = ""
		c.rt.details = maps.Clone(gs.Details)
		r.pending, c.rt.pendingExit = c.rt.pendingExit, nil
		if c.rec.PowerState != status.PowerRunning {
			msg := gs.Message
			c.note(kindState, from, c.rec.PowerState, causeOf(by), "guest did not stay up: "+msg)
			c.emit(events.InstanceError, map[string]any{"error": msg, "operation": "start"}, by)
			return nil
		}
		detail := ""
		if spec.RestoreState {
			detail = "restored"
		}
		c.note(kindState, from, status.PowerRunning, causeOf(by), detail)
		c.emit(r.action, nil, by)
		if spec.RestoreState && savedReady {
			// The restored memory holds the guest's Ready declaration; its
			// agent has no reason to repeat it.
			c.rec.Config[KeyReady] = "true"
			c.rt.readyAt = &startAt
			c.note(kindReady, "false", "true", causeOf(by), "restored")
			c.emit(events.InstanceReady, map[string]any{"restored": true}, by)
		}
		return nil
	})
	if err != nil {
		m.endOp(r.ctx, r.e)
		return fmt.Errorf("recording the start (the guest may run): %w", err)
	}
	r.view = view
	if view.Status == status.Stopped.String() || view.Status == status.Error.String() {
		r.done = true
	}
	return nil
}

// startLink asks the backend for the guest's link endpoint and records its
// kind (and a vsock guest's CID). An unknown endpoint is logged, not an
// error: the guest runs without a link.
func (m *Manager) startLink(r *startRun) error {
	ep, err := r.b.LinkEndpoint(r.ctx, r.h)
	if err != nil {
		m.log.Warn("guest link endpoint unknown", "instance", r.rec.Name, "err", err)
		return nil
	}
	r.ep = ep
	if ep == nil {
		return nil
	}
	boot := r.view.Boot
	view, err := m.mutate(context.WithoutCancel(r.ctx), r.e, func(c *change) error {
		if c.rec.PowerState != status.PowerRunning || c.rec.Boot != boot {
			return nil // it exited meanwhile
		}
		c.rt.link = string(ep.Kind)
		if ep.Kind == contract.LinkVsock && ep.CID != 0 {
			cid := strconv.FormatUint(uint64(ep.CID), 10)
			if c.rec.Config[KeyVsockID] != cid {
				c.rec.Config[KeyVsockID] = cid
				c.persist = true
			}
		}
		return nil
	})
	if err != nil {
		m.log.Error("recording the guest link", "instance", r.rec.Name, "err", err)
		view = m.view(r.e)
	}
	r.view = view
	return nil
}

// startNotify tells the hooks the guest runs (with its link endpoint), and
// handles an exit that arrived while the start ran.
func (m *Manager) startNotify(r *startRun) error {
	ep := r.ep
	m.notify(r.e, bootRunning(r.view.Boot), func(h Hooks, inst *Instance) { h.GuestRunning(inst, ep) })
	if r.pending != nil && !r.pending.Time.Before(r.startAt) {
		m.guestExited(context.WithoutCancel(r.ctx), r.e, *r.pending)
	}
	return nil
}
