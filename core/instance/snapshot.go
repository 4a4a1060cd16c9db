package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Snapshot is an instance's snapshot as the service reports it.
type Snapshot struct {
	Name       string
	CreatedAt  time.Time
	Stateful   bool // holds the memory state
	Running    bool // the guest ran when it was taken
	Ready      bool // the guest was Ready when it was taken
	Backend    string
	Config     map[string]string
	Devices    map[string]map[string]string
	DiskBytes  int64
	StateBytes int64
	Details    map[string]string // backend facts: "layout", "ring_port"
	// Consistency says how consistent the disks are: ConsistencyFilesystem
	// (frozen through the agent), ConsistencyCrash, ConsistencyStopped.
	Consistency string
	// ConsistencyDetail says why: what was frozen, or why nothing was.
	ConsistencyDetail string
}

func snapshotOf(s *record.Snapshot) *Snapshot {
	return &Snapshot{Name: s.Name, CreatedAt: s.CreatedAt, Stateful: s.Stateful, Running: s.Running, Ready: s.Ready,
		Backend: s.Backend, Config: s.Config, Devices: s.Devices, DiskBytes: s.DiskBytes, StateBytes: s.StateBytes, Details: s.Details,
		Consistency: s.Consistency, ConsistencyDetail: s.ConsistencyDetail}
}

// MaxSnapshotName is the longest snapshot name, in bytes.
const MaxSnapshotName = 63

// ValidateSnapshotName checks a snapshot name under LXD's rules (not
// empty, no "/", not "." or "..") and guestlink's own, which keep it a
// safe URL segment and file name: at most 63 bytes, no white space or
// control characters, none of `?&+#%\`, no leading ".".
func ValidateSnapshotName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("snapshot name is empty: %w", errdefs.ErrInvalid)
	case len(name) > MaxSnapshotName:
		return fmt.Errorf("snapshot name %q is %d bytes, the limit is %d: %w", name, len(name), MaxSnapshotName, errdefs.ErrInvalid)
	case strings.Contains(name, "/"):
		return fmt.Errorf("snapshot name %q: snapshot names may not contain slashes: %w", name, errdefs.ErrInvalid)
	case name == "." || name == "..":
		return fmt.Errorf("invalid snapshot name %q: %w", name, errdefs.ErrInvalid)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("snapshot name %q may not start with '.': %w", name, errdefs.ErrInvalid)
	case strings.ContainsAny(name, "?&+#%\\"):
		return fmt.Errorf("snapshot name %q may not contain any of ?&+#%%\\: %w", name, errdefs.ErrInvalid)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0:
		return fmt.Errorf("snapshot name %q may not contain white space or control characters: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

// snapshotStore returns the store's SnapshotStore.
func (m *Manager) snapshotStore() (record.SnapshotStore, error) {
	s, ok := m.store.(record.SnapshotStore)
	if !ok {
		return nil, fmt.Errorf("the store keeps no snapshots: %w", errdefs.ErrNotSupported)
	}
	return s, nil
}

// snapshotBackend returns the instance's backend as a Snapshotter, or a
// precise errdefs.ErrNotSupported.
func (m *Manager) snapshotBackend(ctx context.Context, rec *record.Instance, stateful bool) (contract.Backend, contract.Snapshotter, error) {
	b, info, err := m.backendInfo(ctx, rec.Backend)
	if err != nil {
		return nil, nil, err
	}
	sn, ok := b.(contract.Snapshotter)
	if !info.Has(contract.CapSnapshot) || !ok {
		return nil, nil, fmt.Errorf("backend %s cannot take snapshots (it does not announce %s): %w", rec.Backend, contract.CapSnapshot, errdefs.ErrNotSupported)
	}
	if stateful && !info.Has(contract.CapSnapshotStateful) {
		return nil, nil, fmt.Errorf("backend %s cannot take stateful snapshots (it does not announce %s); take one without --stateful: %w", rec.Backend, contract.CapSnapshotStateful, errdefs.ErrNotSupported)
	}
	return b, sn, nil
}

// ensureGuest creates the guest of an instance that has none yet (never
// started), so a backend has somewhere to keep its snapshots; e.op is held.
func (m *Manager) ensureGuest(ctx context.Context, e *entry, rec *record.Instance, b contract.Backend) (contract.Handle, error) {
	if len(rec.Handle) > 0 {
		return rec.Handle, nil
	}
	h, err := b.Create(ctx, specOf(rec, nil))
	if err != nil {
		return nil, fmt.Errorf("creating guest: %w", err)
	}
	if _, err := m.mutate(ctx, e, func(c *change) error {
		c.rec.Handle = slices.Clone(h)
		c.persist = true
		return nil
	}); err != nil {
		return nil, err
	}
	return h, nil
}

// snapshotConfig is the config a snapshot keeps: the instance's, without
// the Ready flags (kept apart, in Snapshot.Ready).
func snapshotConfig(cfg map[string]string) map[string]string {
	out := maps.Clone(cfg)
	delete(out, KeyReady)
	delete(out, KeySavedReady)
	return out
}

// CreateSnapshot takes a snapshot of an instance: its config, devices and
// volatile keys, whether it ran and was Ready, and the backend's files
// (disks; with opts.Stateful, the running guest's memory state, which needs
// contract.CapSnapshotStateful). A running guest with a CONNECTED agent has its
// filesystems frozen through the agent while the backend takes the
// snapshot (unless opts.NoFreeze), and thawed afterwards whatever happened;
// a guest that cannot be frozen is snapshotted crash-consistent, and the
// snapshot's Consistency and ConsistencyDetail say which it is. A duplicate
// name is errdefs.ErrAlreadyExists. It publishes instance-snapshot-created.
func (m *Manager) CreateSnapshot(ctx context.Context, name, snap string, opts SnapshotOptions, by events.Requestor) (*Snapshot, error) {
	stateful := opts.Stateful
	wrap := func(err error) error { return fmt.Errorf("creating snapshot %q of instance %q: %w", snap, name, err) }
	if err := ValidateSnapshotName(snap); err != nil {
		return nil, wrap(err)
	}
	ss, err := m.snapshotStore()
	if err != nil {
		return nil, wrap(err)
	}
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
	if _, err := ss.Snapshot(ctx, rec.ID, snap); err == nil {
		return nil, wrap(fmt.Errorf("the instance has a snapshot of that name: %w", errdefs.ErrAlreadyExists))
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, wrap(storeErr(err))
	}
	b, sn, err := m.snapshotBackend(ctx, rec, stateful)
	if err != nil {
		return nil, wrap(err)
	}
	running := rec.PowerState == status.PowerRunning
	if stateful && !running {
		return nil, wrap(fmt.Errorf("a stateful snapshot needs a running instance (it is %s); take one without --stateful: %w", rec.PowerState, errdefs.ErrConflict))
	}
	h, err := m.ensureGuest(ctx, e, rec, b)
	if err != nil {
		return nil, wrap(err)
	}
	// The flags as they are when the backend takes the snapshot (a guest
	// cannot change its Ready flag while the snapshot is taken: changes go
	// through this entry's lock only for the flag's write, so read it now).
	rec, rt, err := m.snapshot(e)
	if err != nil {
		return nil, wrap(err)
	}
	ready := running && rec.Config[KeyReady] == "true"
	thaw, consistency, detail := m.freezeForSnapshot(ctx, rec.UUID, running, rt.agent.State, opts)
	thawOnce := func() {
		if thaw != nil {
			consistency, detail = thaw()
			thaw = nil
		}
	}
	defer thawOnce() // a freeze never outlives the snapshot, even one that fails or panics
	info, err := sn.SnapshotCreate(ctx, h, snap, stateful)
	thawOnce()
	m.log.Info("snapshot consistency", "instance", name, "snapshot", snap, "identity", by.Describe(),
		"consistency", consistency, "detail", detail, "err", err)
	if err != nil {
		return nil, wrap(err)
	}
	row := &record.Snapshot{InstanceID: rec.ID, Name: snap, Stateful: stateful, Running: running, Ready: ready,
		Backend: rec.Backend, Config: snapshotConfig(rec.Config), Devices: cloneDevices(rec.Devices),
		DiskBytes: info.DiskBytes, StateBytes: info.StateBytes, Details: maps.Clone(info.Details),
		Consistency: consistency, ConsistencyDetail: detail}
	if row.Details == nil {
		row.Details = map[string]string{}
	}
	if err := ss.CreateSnapshot(ctx, row); err != nil {
		if derr := sn.SnapshotDelete(context.WithoutCancel(ctx), h, snap); derr != nil {
			m.log.Error("removing the files of an unsaved snapshot", "instance", name, "snapshot", snap, "err", derr)
		}
		return nil, wrap(storeErr(err))
	}
	m.publish(ctx, []events.Event{events.NewLifecycle(events.InstanceSnapshotCreated, rec.Name,
		map[string]any{"snapshot": snap, "stateful": stateful, "consistency": consistency}, &by)})
	return snapshotOf(row), nil
}

// Snapshots lists an instance's snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, name string) ([]*Snapshot, error) {
	ss, err := m.snapshotStore()
	if err != nil {
		return nil, fmt.Errorf("listing snapshots of instance %q: %w", name, err)
	}
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots of instance %q: %w", name, err)
	}
	rows, err := ss.Snapshots(ctx, m.idOf(e))
	if err != nil {
		return nil, fmt.Errorf("listing snapshots of instance %q: %w", name, storeErr(err))
	}
	out := make([]*Snapshot, len(rows))
	for i, r := range rows {
		out[i] = snapshotOf(r)
	}
	return out, nil
}

// GetSnapshot returns one snapshot of an instance.
func (m *Manager) GetSnapshot(ctx context.Context, name, snap string) (*Snapshot, error) {
	wrap := func(err error) error { return fmt.Errorf("snapshot %q of instance %q: %w", snap, name, err) }
	ss, err := m.snapshotStore()
	if err != nil {
		return nil, wrap(err)
	}
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	row, err := ss.Snapshot(ctx, m.idOf(e), snap)
	if err != nil {
		return nil, wrap(storeErr(err))
	}
	return snapshotOf(row), nil
}

// idOf returns an entry's store id.
func (m *Manager) idOf(e *entry) int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return e.rec.ID
}

// DeleteSnapshot deletes a snapshot and its files; it publishes
// instance-snapshot-deleted.
func (m *Manager) DeleteSnapshot(ctx context.Context, name, snap string, by events.Requestor) error {
	wrap := func(err error) error { return fmt.Errorf("deleting snapshot %q of instance %q: %w", snap, name, err) }
	ss, err := m.snapshotStore()
	if err != nil {
		return wrap(err)
	}
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
	if _, err := ss.Snapshot(ctx, rec.ID, snap); err != nil {
		return wrap(storeErr(err))
	}
	if len(rec.Handle) > 0 {
		b, err := m.backends.Backend(rec.Backend)
		if err != nil {
			return wrap(err)
		}
		sn, ok := b.(contract.Snapshotter)
		if !ok {
			return wrap(fmt.Errorf("backend %s cannot delete snapshots: %w", rec.Backend, errdefs.ErrNotSupported))
		}
		if err := sn.SnapshotDelete(ctx, rec.Handle, snap); err != nil {
			return wrap(err)
		}
	}
	if err := ss.DeleteSnapshot(ctx, rec.ID, snap); err != nil {
		return wrap(storeErr(err))
	}
	m.publish(ctx, []events.Event{events.NewLifecycle(events.InstanceSnapshotDeleted, rec.Name,
		map[string]any{"snapshot": snap}, &by)})
	return nil
}

// RenameSnapshot renames a snapshot (the new name validated, a taken one
// errdefs.ErrAlreadyExists); it publishes instance-snapshot-renamed.
func (m *Manager) RenameSnapshot(ctx context.Context, name, oldName, newName string, by events.Requestor) error {
	wrap := func(err error) error {
		return fmt.Errorf("renaming snapshot %q of instance %q to %q: %w", oldName, name, newName, err)
	}
	if err := ValidateSnapshotName(newName); err != nil {
		return wrap(err)
	}
	ss, err := m.snapshotStore()
	if err != nil {
		return wrap(err)
	}
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
	if _, err := ss.Snapshot(ctx, rec.ID, oldName); err != nil {
		return wrap(storeErr(err))
	}
	if _, err := ss.Snapshot(ctx, rec.ID, newName); err == nil {
		return wrap(fmt.Errorf("the instance has a snapshot called %q: %w", newName, errdefs.ErrAlreadyExists))
	}
	var sn contract.Snapshotter
	if len(rec.Handle) > 0 {
		b, err := m.backends.Backend(rec.Backend)
		if err != nil {
			return wrap(err)
		}
		var ok bool
		if sn, ok = b.(contract.Snapshotter); !ok {
			return wrap(fmt.Errorf("backend %s cannot rename snapshots: %w", rec.Backend, errdefs.ErrNotSupported))
		}
		if err := sn.SnapshotRename(ctx, rec.Handle, oldName, newName); err != nil {
			return wrap(err)
		}
	}
	if err := ss.RenameSnapshot(ctx, rec.ID, oldName, newName); err != nil {
		if sn != nil {
			if rerr := sn.SnapshotRename(context.WithoutCancel(ctx), rec.Handle, newName, oldName); rerr != nil {
				m.log.Error("renaming snapshot files back", "instance", name, "snapshot", newName, "err", rerr)
			}
		}
		return wrap(storeErr(err))
	}
	m.publish(ctx, []events.Event{events.NewLifecycle(events.InstanceSnapshotRenamed, rec.Name,
		map[string]any{"snapshot": newName, "old_name": oldName}, &by)})
	return nil
}

// RestoreOptions says how to restore a snapshot.
type RestoreOptions struct {
	// Stateful resumes the guest from the snapshot's memory state, with
	// the Ready flag it had; it needs a stateful snapshot.
	Stateful bool
}

// restoreHint names the command that works when a state cannot be restored.
func restoreHint(name, snap string) string {
	return fmt.Sprintf("`guestlink restore %s %s` (without --stateful) restores the snapshot and boots it afresh", name, snap)
}

// Restore restores a snapshot: the instance's config, devices and volatile
// keys and the backend's files (disks) come back. A running instance is
// stopped first. With Stateful the guest is then resumed from the
// snapshot's memory state and its Ready flag comes back as it was; without,
// a snapshot of a running instance boots afresh (Ready cleared until the
// guest declares it) and one of a stopped instance stays Stopped. A state
// the backend cannot load (say, saved under the other serial layout) is
// refused before anything changes, errdefs.ErrConflict, naming the command
// that works. It publishes instance-snapshot-restored.
func (m *Manager) Restore(ctx context.Context, name, snap string, opts RestoreOptions, by events.Requestor) error {
	wrap := func(err error) error {
		how := ""
		if opts.Stateful {
			how = " with its state"
		}
		return fmt.Errorf("restoring snapshot %q of instance %q%s: %w", snap, name, how, err)
	}
	ss, err := m.snapshotStore()
	if err != nil {
		return wrap(err)
	}
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
	row, err := ss.Snapshot(ctx, rec.ID, snap)
	if err != nil {
		return wrap(storeErr(err))
	}
	if opts.Stateful && !row.Stateful {
		return wrap(fmt.Errorf("the snapshot holds no memory state (it was taken without --stateful); %s: %w", restoreHint(name, snap), errdefs.ErrConflict))
	}
	_, sn, err := m.snapshotBackend(ctx, rec, opts.Stateful)
	if err != nil {
		return wrap(err)
	}
	if len(rec.Handle) == 0 {
		return wrap(fmt.Errorf("the instance has no guest to restore into: %w", errdefs.ErrConflict))
	}
	ropts := contract.RestoreOptions{Stateful: opts.Stateful, CheckOnly: true}
	if err := sn.SnapshotRestore(ctx, rec.Handle, snap, ropts); err != nil {
		if opts.Stateful && errors.Is(err, errdefs.ErrConflict) {
			return wrap(fmt.Errorf("%w; %s", err, restoreHint(name, snap)))
		}
		return wrap(err)
	}
	if rec.PowerState == status.PowerRunning {
		if err := m.stop(ctx, e, StopOptions{Force: true}, by, events.InstanceStopped); err != nil {
			return wrap(fmt.Errorf("stopping the instance first: %w", err))
		}
	}
	rec, _, err = m.snapshot(e)
	if err != nil {
		return wrap(err)
	}
	ropts.CheckOnly = false
	if err := sn.SnapshotRestore(ctx, rec.Handle, snap, ropts); err != nil {
		return wrap(err)
	}
	if _, err := m.mutate(ctx, e, func(c *change) error {
		cfg := snapshotConfig(row.Config)
		cfg[KeyUUID] = c.rec.UUID
		cfg[KeyReady] = "false"
		if opts.Stateful && row.Ready {
			cfg[KeySavedReady] = "true"
		}
		if c.rec.Config[KeyReady] == "true" {
			c.note(kindReady, "true", "false", causeOf(by), "snapshot restored")
		}
		c.rec.Config = cfg
		c.rec.Devices = cloneDevices(row.Devices)
		if c.rec.Devices == nil {
			c.rec.Devices = map[string]map[string]string{}
		}
		c.rt.readyAt = nil
		c.persist = true
		c.emit(events.InstanceSnapshotRestored, map[string]any{"snapshot": snap, "stateful": opts.Stateful}, by)
		return nil
	}); err != nil {
		return wrap(err)
	}
	if !opts.Stateful && !row.Running {
		return nil
	}
	if err := m.start(ctx, e, StartOptions{Stateless: !opts.Stateful}, by, events.InstanceStarted); err != nil {
		return wrap(err)
	}
	return nil
}

// Move moves a stopped instance to another backend that can take its
// guest (contract.CapMove; for QEMU, between qemu-legacy and qemu), keeping
// its disks, config and snapshots. A running instance is
// errdefs.ErrConflict; a backend that cannot take it answers precisely.
// It publishes instance-moved.
func (m *Manager) Move(ctx context.Context, name, backend string, by events.Requestor) error {
	wrap := func(err error) error { return fmt.Errorf("moving instance %q to backend %s: %w", name, backend, err) }
	if backend == "" {
		return wrap(fmt.Errorf("no target backend: %w", errdefs.ErrInvalid))
	}
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
	if rec.PowerState != status.PowerStopped {
		return wrap(fmt.Errorf("the instance is %s; only a stopped instance moves (guestlink stop %s first): %w",
			status.Derive(rec.PowerState, rec.Config[KeyReady] == "true", status.OpNone), name, errdefs.ErrConflict))
	}
	if rec.Backend == backend {
		return wrap(fmt.Errorf("the instance is already on backend %s: %w", backend, errdefs.ErrInvalid))
	}
	tb, tinfo, err := m.backendInfo(ctx, backend)
	if err != nil {
		return wrap(err)
	}
	ad, ok := tb.(contract.Adopter)
	if !tinfo.Has(contract.CapMove) || !ok {
		return wrap(fmt.Errorf("backend %s cannot take instances of other backends (it does not announce %s): %w", backend, contract.CapMove, errdefs.ErrNotSupported))
	}
	_, sinfo, err := m.backendInfo(ctx, rec.Backend)
	if err != nil {
		return wrap(err)
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Config)) {
		for _, p := range sinfo.ConfigPrefixes {
			if strings.HasPrefix(k, p) && !slices.Contains(tinfo.ConfigPrefixes, p) {
				return wrap(fmt.Errorf("config key %s belongs to backend %s, which %s does not understand (unset it first): %w", k, rec.Backend, backend, errdefs.ErrInvalid))
			}
		}
	}
	h := rec.Handle
	if len(h) > 0 {
		if h, err = ad.Adopt(ctx, rec.Handle, rec.Backend, specOf(rec, nil)); err != nil {
			return wrap(err)
		}
	}
	from := rec.Backend
	if _, err := m.mutate(ctx, e, func(c *change) error {
		c.rec.Backend = backend
		c.rec.Handle = slices.Clone(h)
		c.persist = true
		c.note(kindState, c.rec.PowerState, c.rec.PowerState, causeOf(by), "moved from backend "+from+" to "+backend)
		c.emit(events.InstanceMoved, map[string]any{"from": from, "to": backend}, by)
		return nil
	}); err != nil {
		return wrap(fmt.Errorf("recording the move (the guest is now %s's): %w", backend, err))
	}
	return nil
}
