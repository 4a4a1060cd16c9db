package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/guestlink/guestlink/core/cloudinit"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// CreateRequest describes a new instance.
type CreateRequest struct {
	Name    string
	Backend string // "" is the manager's default backend
	Config  map[string]string
	Devices map[string]map[string]string
	Start   bool
	// Image is an alias, fingerprint or fingerprint prefix of a store image
	// the guest boots from ("" for none); the backend must announce disk.v1.
	Image string
	// Profiles are applied in order under Config and Devices (profiles.go);
	// nil is [DefaultProfile], an empty list none (as LXD).
	Profiles []string
}

// StopOptions says how to stop an instance (see contract.StopOptions).
type StopOptions = contract.StopOptions

// Create creates an instance: it validates the request, lets the backend
// prepare the guest (the backend checks its own config keys), stores the
// instance with a new volatile.uuid, records it in the timeline and
// publishes instance-created; with req.Start it then starts it. The name
// is stored lowercase and a name taken in any case is taken. A bad name
// or config is errdefs.ErrInvalid, a taken name errdefs.ErrAlreadyExists,
// an unknown backend errdefs.ErrNotFound, a backend that reports the host
// lacks something it needs errdefs.ErrUnavailable naming it (checked before
// anything is made); a failed Create changes nothing.
func (m *Manager) Create(ctx context.Context, req CreateRequest, by events.Requestor) (*Instance, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, fmt.Errorf("creating instance: %w", err)
	}
	req.Name = canonicalName(req.Name) // names are case-insensitive, stored lowercase (names.go)
	wrap := func(err error) error { return fmt.Errorf("creating instance %q: %w", req.Name, err) }
	backend := req.Backend
	if backend == "" {
		backend = m.defBack
	}
	if backend == "" {
		return nil, wrap(fmt.Errorf("no backend given and no default backend: %w", errdefs.ErrInvalid))
	}
	for _, name := range slices.Sorted(maps.Keys(req.Devices)) { // the first bad one in name order
		if err := ValidateDevice(ctx, name, req.Devices[name], m.devices.volumes, m.devices.allowPaths); err != nil {
			return nil, wrap(err)
		}
	}
	if err := m.load(ctx, false); err != nil {
		return nil, wrap(err)
	}
	b, info, err := m.backendInfo(ctx, backend)
	if err != nil {
		return nil, wrap(err)
	}
	if err := checkUsable(ctx, b); err != nil { // before anything is made
		return nil, wrap(err)
	}
	if err := checkChangeSize(len(req.Config)); err != nil {
		return nil, wrap(err)
	}
	profileNames := req.Profiles
	if profileNames == nil {
		profileNames = []string{}
		if _, ok := m.store.(record.ProfileStore); ok {
			profileNames = []string{DefaultProfile}
		}
	}
	profs, err := m.loadProfiles(ctx, profileNames)
	if err != nil {
		return nil, wrap(err)
	}
	cfg := make(map[string]string, len(req.Config)+1)
	for _, k := range slices.Sorted(maps.Keys(req.Config)) {
		v := req.Config[k]
		if v == "" {
			continue // as LXD: an empty value is no value
		}
		if err := validateKey(k, v, false, backendKeys{backend, info}); err != nil {
			return nil, wrap(err)
		}
		cfg[k] = v
	}
	if cfg[KeyUUID] == "" {
		cfg[KeyUUID] = newUUID()
	}
	if req.Image != "" {
		if m.images == nil {
			return nil, wrap(&ImageError{fmt.Errorf("this daemon has no image store: %w", errdefs.ErrInvalid)})
		}
		if !info.Has(contract.CapDisk) {
			return nil, wrap(&ImageError{fmt.Errorf("backend %q cannot boot from an image (it does not announce %s): %w", backend, contract.CapDisk, errdefs.ErrInvalid)})
		}
		fp, err := m.images.Fingerprint(ctx, req.Image)
		if err != nil {
			return nil, wrap(&ImageError{err})
		}
		cfg[KeyBaseImage] = fp
		props, err := m.images.Properties(ctx, fp)
		if err != nil {
			return nil, wrap(&ImageError{err})
		}
		// The requirements are judged on the expanded config (a profile
		// may set the memory); what they raise is the instance's own key.
		eff, _ := Expand(profs, cfg, nil)
		before := maps.Clone(eff)
		raised, err := applyImageRequirements(eff, backend, req.Image, props) // requirements.go
		if err != nil {
			return nil, wrap(err)
		}
		for k, v := range eff {
			if before[k] != v {
				cfg[k] = v
			}
		}
		if raised != "" {
			m.log.Info("memory raised to the image's minimum", "instance", req.Name, "change", raised)
		}
		_, effDevs := Expand(profs, nil, req.Devices)
		req.Devices, raised, err = applyDiskRequirement(effDevs, req.Devices, req.Image, props) // requirements.go
		if err != nil {
			return nil, wrap(err)
		}
		if raised != "" {
			m.log.Info("root disk raised to the image's minimum", "instance", req.Name, "change", raised)
		}
	}
	uuid := cfg[KeyUUID]
	_, effDevs := Expand(profs, nil, req.Devices)
	storeHwaddrs(cfg, uuid, effDevs) // devices.go, profiles' NICs too
	if err := checkConfigBounds(cfg); err != nil {
		return nil, wrap(err)
	}

	m.mu.Lock()
	_, taken := m.findLocked(req.Name)
	other, uuidTaken := m.byUUID[uuid]
	switch {
	case taken || m.reserved[req.Name]:
		m.mu.Unlock()
		return nil, wrap(fmt.Errorf("an instance with this name exists: %w", errdefs.ErrAlreadyExists))
	case uuidTaken:
		otherName := other.rec.Name
		m.mu.Unlock()
		return nil, wrap(fmt.Errorf("%s %q is used by instance %q: %w", KeyUUID, uuid, otherName, errdefs.ErrAlreadyExists))
	}
	m.reserved[req.Name] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.reserved, req.Name)
		m.mu.Unlock()
	}()

	now := time.Now().UTC()
	rec := &record.Instance{
		Name:       req.Name,
		UUID:       uuid,
		Backend:    backend,
		Config:     cfg,
		Devices:    cloneDevices(req.Devices),
		PowerState: status.PowerStopped,
		CreatedAt:  now,
		Location:   m.location,
		Profiles:   slices.Clone(profileNames),
	}
	spec, err := m.specWithImage(ctx, rec, nil)
	if err != nil {
		return nil, wrap(err)
	}
	h, err := b.Create(ctx, spec)
	if err != nil {
		return nil, wrap(err) // the plugin host names the backend
	}
	rec.Handle = h
	if err := m.store.CreateInstance(ctx, rec); err != nil {
		if derr := b.Delete(context.WithoutCancel(ctx), h); derr != nil {
			m.log.Error("removing the guest of an instance that could not be stored", "instance", req.Name, "err", derr)
		}
		return nil, wrap(storeErr(err))
	}
	e := newEntry(rec)
	m.mu.Lock()
	m.addLocked(e)
	view := viewOf(e)
	m.mu.Unlock()

	entry := &record.TimelineEntry{InstanceID: rec.ID, Time: now, Kind: kindState, To: status.PowerStopped, Cause: causeOf(by), Detail: "created"}
	ev := events.NewLifecycle(events.InstanceCreated, rec.Name, nil, &by)
	m.publish(ctx, []events.Event{ev})
	m.appendTimeline(ctx, rec.Name, entry)
	if !req.Start {
		return view, nil
	}
	if err := m.Start(ctx, req.Name, by); err != nil {
		return nil, fmt.Errorf("instance %q was created but not started: %w", req.Name, err)
	}
	return m.Get(ctx, req.Name)
}

// snapshot returns copies of e's current state (errdefs.ErrNotFound once
// it is deleted).
func (m *Manager) snapshot(e *entry) (*record.Instance, runtime, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e.rt.deleted {
		return nil, runtime{}, fmt.Errorf("instance %q: %w", e.rec.Name, errdefs.ErrNotFound)
	}
	return cloneRec(e.rec), e.rt.clone(), nil
}

// view returns e's current view.
func (m *Manager) view(e *entry) *Instance {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return viewOf(e)
}

// setOp marks the transitional operation of e (no store write).
func (m *Manager) setOp(ctx context.Context, e *entry, op string) error {
	_, err := m.mutate(ctx, e, func(c *change) error {
		c.rt.op = op
		return nil
	})
	return err
}

// endOp ends e's transitional operation after its result could not be
// saved (memory only, so it cannot fail for the store's reasons).
func (m *Manager) endOp(ctx context.Context, e *entry) {
	if _, err := m.mutate(context.WithoutCancel(ctx), e, func(c *change) error {
		c.rt.op = status.OpNone
		return nil
	}); err != nil {
		m.log.Error("ending an operation", "err", err)
	}
}

// powerOf maps a backend status to a power state; unknown gives def.
func powerOf(s contract.Status, def string) string {
	switch s {
	case contract.StatusRunning:
		return status.PowerRunning
	case contract.StatusStopped:
		return status.PowerStopped
	case contract.StatusError:
		return status.PowerError
	}
	return def
}

// Stop stops an instance's guest (errdefs.ErrConflict if it is already
// stopped; an instance in Error may be stopped to clean up). The status
// is Stopping meanwhile. The Ready flag is cleared, the agent forgotten,
// instance-stopped published and the hooks told. Stateful needs a backend
// with contract.CapStateful (errdefs.ErrNotSupported otherwise).
func (m *Manager) Stop(ctx context.Context, name string, opts StopOptions, by events.Requestor) error {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("stopping instance %q: %w", name, err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	if err := m.stop(ctx, e, opts, by, events.InstanceStopped); err != nil {
		return fmt.Errorf("stopping instance %q: %w", name, err)
	}
	return nil
}

// stop stops e's guest; e.op is held. action is the event to publish ("" none).
func (m *Manager) stop(ctx context.Context, e *entry, opts StopOptions, by events.Requestor, action string) error {
	rec, _, err := m.snapshot(e)
	if err != nil {
		return err
	}
	if rec.PowerState == status.PowerStopped || rec.PowerState == "" {
		return fmt.Errorf("already stopped: %w", errdefs.ErrConflict)
	}
	b, info, err := m.backendInfo(ctx, rec.Backend)
	if err != nil {
		return err
	}
	if opts.Stateful && !info.Has(contract.CapStateful) {
		return fmt.Errorf("backend %q cannot stop statefully: %w", rec.Backend, errdefs.ErrNotSupported)
	}
	if err := m.setOp(ctx, e, status.OpStopping); err != nil {
		return err
	}
	gs := &contract.GuestState{Status: contract.StatusStopped}
	if len(rec.Handle) > 0 {
		gs, err = b.Stop(ctx, rec.Handle, opts)
		if err != nil {
			var pending *contract.Event
			if _, merr := m.mutate(context.WithoutCancel(ctx), e, func(c *change) error {
				c.rt.op = status.OpNone
				pending, c.rt.pendingExit = c.rt.pendingExit, nil
				return nil
			}); merr != nil {
				m.log.Error("ending a failed stop", "instance", rec.Name, "err", merr)
			}
			if pending != nil {
				m.guestExited(context.WithoutCancel(ctx), e, *pending)
			}
			return err
		}
		if gs == nil {
			gs = &contract.GuestState{Status: contract.StatusStopped}
		}
		m.guestExiting(ctx, e)
	}
	_, err = m.mutate(context.WithoutCancel(ctx), e, func(c *change) error {
		detail := ""
		delete(c.rec.Config, KeySavedReady)
		if opts.Stateful {
			detail = "stateful"
			if c.rec.Config[KeyReady] == "true" {
				c.rec.Config[KeySavedReady] = "true"
			}
		}
		m.stopped(c, powerOf(gs.Status, status.PowerStopped), gs.Message, causeOf(by), detail)
		c.quiet = action == "" // a restart: its start announces the conditions
		if action != "" {
			c.emit(action, nil, by)
		}
		return nil
	})
	if err != nil {
		m.endOp(ctx, e)
		return fmt.Errorf("recording the stop: %w", err)
	}
	m.notify(e, always, func(h Hooks, inst *Instance) { h.GuestStopped(inst) })
	return nil
}

// stopped records in c that the guest no longer runs: power state (stopped
// or error with msg), Ready cleared, agent and link forgotten.
func (m *Manager) stopped(c *change, power, msg, cause, detail string) {
	from := c.rec.PowerState
	if power == status.PowerRunning {
		power = status.PowerStopped
	}
	c.rec.PowerState = power
	c.persist = true
	c.setReadyFalse(cause, detail)
	if c.rt.agent.State != AgentNone {
		c.note(kindAgent, string(c.rt.agent.State), string(AgentNone), cause, "guest stopped")
	}
	c.rt.op = status.OpNone
	c.rt.agent = AgentInfo{}
	c.rt.link = ""
	c.rt.pendingExit = nil
	c.rt.details = nil
	c.rt.readyTimedOut = false
	if msg != "" {
		c.rt.details = map[string]string{"error": msg}
		if detail == "" {
			detail = msg
		} else {
			detail += ": " + msg
		}
	}
	c.note(kindState, from, power, cause, detail)
}

// Restart stops and starts a running instance (errdefs.ErrConflict if it
// does not run) and publishes instance-restarted.
func (m *Manager) Restart(ctx context.Context, name string, opts StopOptions, by events.Requestor) error {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("restarting instance %q: %w", name, err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	rec, _, err := m.snapshot(e)
	if err != nil {
		return fmt.Errorf("restarting instance %q: %w", name, err)
	}
	if rec.PowerState != status.PowerRunning {
		return fmt.Errorf("restarting instance %q: not running: %w", name, errdefs.ErrConflict)
	}
	opts.Stateful = false
	if err := m.stop(ctx, e, opts, by, ""); err != nil {
		return fmt.Errorf("restarting instance %q: %w", name, err)
	}
	if err := m.start(ctx, e, StartOptions{}, by, events.InstanceRestarted); err != nil {
		return fmt.Errorf("restarting instance %q: %w", name, err)
	}
	return nil
}

// Delete deletes an instance and its guest. A running instance is
// errdefs.ErrConflict unless force, which stops it first.
func (m *Manager) Delete(ctx context.Context, name string, force bool, by events.Requestor) error {
	wrap := func(err error) error { return fmt.Errorf("deleting instance %q: %w", name, err) }
	e, err := m.lookup(ctx, name)
	if err != nil {
		return wrap(err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	rec, _, err := m.snapshot(e)
	if err != nil {
		return wrap(err)
	}
	running := rec.PowerState == status.PowerRunning
	if running && !force {
		return wrap(fmt.Errorf("instance is running (stop it first or force): %w", errdefs.ErrConflict))
	}
	b, err := m.backends.Backend(rec.Backend)
	switch {
	case err == nil:
	case force && errors.Is(err, errdefs.ErrNotFound):
		b = nil // the backend is gone for good: forget the record
	default:
		return wrap(err)
	}
	if b != nil && len(rec.Handle) > 0 {
		if rec.PowerState != status.PowerStopped {
			if _, err := b.Stop(ctx, rec.Handle, contract.StopOptions{Force: true}); err != nil && !isNotFound(err) {
				return wrap(fmt.Errorf("stopping guest: %w", err))
			}
		}
		if err := b.Delete(ctx, rec.Handle); err != nil && !isNotFound(err) {
			return wrap(err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := m.store.DeleteInstance(ctx, rec.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return wrap(storeErr(err))
	}
	m.mu.Lock()
	view := viewOf(e)
	e.rt.deleted = true
	m.removeLocked(e)
	m.wakeLocked(e)
	m.mu.Unlock()
	m.stopReadyTimer(e)
	m.publish(ctx, []events.Event{events.NewLifecycle(events.InstanceDeleted, rec.Name, nil, &by)})
	if m.hooks != nil {
		e.hook.Lock()
		if running {
			m.hooks.GuestStopped(view)
		}
		if dh, ok := m.hooks.(DeleteHooks); ok {
			dh.InstanceDeleted(view)
		}
		e.hook.Unlock()
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, contract.ErrNotFound)
}

// renewCloudInitID gives the instance a new random cloud-init instance-id
// (volatile.cloud-init.instance-id) when one of changes concerns cloud-init
// seed data (cloudinit.NeedsNewInstanceID), as LXD does, so that cloud-init
// treats the next boot as a new instance and applies the new data; unless
// the same update sets the instance-id itself (want).
func renewCloudInitID(config, want map[string]string, changes []ConfigChange) {
	if _, explicit := want[KeyCloudInitID]; explicit {
		return
	}
	for _, ch := range changes {
		if cloudinit.NeedsNewInstanceID(ch.Key) {
			config[KeyCloudInitID] = newUUID()
			return
		}
	}
}

// UpdateConfig sets and unsets config keys of an instance (a key set to ""
// is unset) after validating all of them as Create does; volatile.uuid
// cannot change. Nothing changes if any key is bad (errdefs.ErrInvalid).
// A change of cloud-init seed data renews the cloud-init instance-id.
// It publishes instance-updated when something changed and tells the
// hooks about the changes of a running instance.
func (m *Manager) UpdateConfig(ctx context.Context, name string, set map[string]string, unset []string, by events.Requestor) (*Instance, error) {
	wrap := func(err error) error { return fmt.Errorf("updating instance %q: %w", name, err) }
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	rec, _, err := m.snapshot(e)
	if err != nil {
		return nil, wrap(err)
	}
	if err := checkChangeSize(len(set) + len(unset)); err != nil {
		return nil, wrap(err)
	}
	var keys backendKeys
	needPrefixes := false
	for _, k := range append(slices.Collect(maps.Keys(set)), unset...) {
		if _, fixed := fixedKeys[k]; !fixed && !daemonKeys[k] && !strings.HasPrefix(k, "user.") && !strings.HasPrefix(k, "cloud-init.") {
			needPrefixes = true
		}
	}
	if needPrefixes {
		_, info, err := m.backendInfo(ctx, rec.Backend)
		if err != nil {
			return nil, wrap(err)
		}
		keys = backendKeys{rec.Backend, info}
	}
	want := map[string]string{} // key -> new value ("" = unset)
	for _, k := range slices.Sorted(maps.Keys(set)) {
		v := set[k]
		if err := validateKey(k, v, v == "", keys); err != nil {
			return nil, wrap(err)
		}
		want[k] = v
	}
	for _, k := range unset {
		if v, ok := set[k]; ok && v != "" {
			return nil, wrap(fmt.Errorf("configuration key %q is both set and unset: %w", k, errdefs.ErrInvalid))
		}
		if err := validateKey(k, "", true, keys); err != nil {
			return nil, wrap(err)
		}
		want[k] = ""
	}
	if v, ok := want[KeyUUID]; ok && v != rec.UUID {
		return nil, wrap(fmt.Errorf("%s cannot be changed: %w", KeyUUID, errdefs.ErrInvalid))
	}
	var changes []ConfigChange
	view, err := m.mutate(ctx, e, func(c *change) error {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			old, v := c.rec.Config[k], want[k]
			if old == v {
				continue
			}
			if v == "" {
				delete(c.rec.Config, k)
			} else {
				c.rec.Config[k] = v
			}
			changes = append(changes, ConfigChange{Key: k, OldValue: old, Value: v})
		}
		if len(changes) > 0 {
			renewCloudInitID(c.rec.Config, want, changes)
			if err := checkConfigBounds(c.rec.Config); err != nil {
				return err
			}
			c.persist = true
			c.emit(events.InstanceUpdated, nil, by)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	if len(changes) > 0 {
		m.notify(e, whenRunning, func(h Hooks, inst *Instance) { h.ConfigChanged(inst, changes) })
	}
	return view, nil
}
