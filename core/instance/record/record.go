// Package record is what the daemon keeps of its instances: the instance
// as stored (Instance), its timeline (TimelineEntry), its snapshots
// (Snapshot), the profiles instances apply (Profile), and the Store
// interfaces that keep them. The instance service (core/instance) programs
// against these interfaces; the store (db/) implements them and converts to
// its own private models at its edge, as containerd's core/containers and
// core/metadata do.
//
// The package is a leaf on purpose: it imports the error kinds and the
// standard library only, so the store can implement it without linking
// the service (and the plugin contract the service links).
package record

import (
	"context"
	"time"

	"github.com/guestlink/guestlink/core/membership"
)

// ErrLeaseLost is wrapped by a Store's instance writes when this cluster
// member's lease on its instances is gone (it was removed from the
// cluster, or its name joined again): the write was refused and no retry
// will succeed. Such errors also wrap errdefs.ErrUnavailable (503). It is
// membership.ErrLeaseLost: the lease is the membership's.
var ErrLeaseLost = membership.ErrLeaseLost

// Instance is one guest as stored.
type Instance struct {
	ID         int64
	Name       string                       // DNS label, unique
	UUID       string                       // unique
	Backend    string                       // the plugin that runs it
	Config     map[string]string            // includes volatile.*, user.*, backend keys
	Devices    map[string]map[string]string // by device name
	Handle     []byte                       // the plugin's opaque handle
	PowerState string                       // "stopped", "running", "error" (core/status)
	Boot       int64                        // +1 at every start
	Location   string                       // the cluster member that runs it ("" outside a cluster)
	CreatedAt  time.Time
	StartedAt  *time.Time
	UpdatedAt  time.Time
	// Profiles are the names of the profiles applied to the instance, in
	// order (later ones win; Config and Devices win over all of them).
	Profiles []string
}

// TimelineEntry is one change in an instance's life: its state, its agent's
// state or its Ready flag, with the time and who caused it.
type TimelineEntry struct {
	ID         int64
	InstanceID int64
	Time       time.Time
	Boot       int64
	Kind       string // "state", "agent", "ready", "throttle"
	From       string
	To         string
	Cause      string // "api", "devlxd", "backend", "daemon", "agent"
	Detail     string
}

// Profile is a named set of config keys and devices that instances apply
// in order before their own (LXD's profiles). It lives in the database, so
// every member of a cluster shares it.
type Profile struct {
	ID          int64
	Name        string
	Description string
	Config      map[string]string
	Devices     map[string]map[string]string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Snapshot is one snapshot of an instance as stored: what the daemon keeps
// of it (its config and devices when taken, whether the guest ran) and the
// facts its backend reported. The backend keeps the snapshot's files (disk
// copies, memory state) under the guest it owns.
type Snapshot struct {
	ID         int64
	InstanceID int64
	Name       string
	CreatedAt  time.Time
	Stateful   bool
	Running    bool   // the guest ran when it was taken
	Ready      bool   // the guest was Ready when it was taken
	Backend    string // the backend that took it
	Config     map[string]string
	Devices    map[string]map[string]string
	DiskBytes  int64
	StateBytes int64
	Details    map[string]string // backend facts: "layout", "ring_port"
	// Consistency is "filesystem" (frozen through the agent), "crash" or
	// "stopped" (core/instance); snapshots stored before it: "crash".
	Consistency       string
	ConsistencyDetail string // what was frozen, or why nothing was
}

// Filter narrows Store.ListInstances. Zero values match everything.
type Filter struct {
	Backend    string
	PowerState string
	Location   string // the cluster member that runs the instance
}

// Store keeps instances and their timelines. All methods are safe for
// concurrent use; every method that returns nil has made its change
// durable. Errors wrap the errdefs kinds: ErrNotFound, ErrAlreadyExists,
// ErrInvalid (a bad argument: no instance, no name), ErrClosed (after the
// store was closed), ErrUnavailable (the database is briefly unreachable),
// and ErrLeaseLost for a cluster member's refused write.
type Store interface {
	CreateInstance(ctx context.Context, in *Instance) error // sets ID; ErrAlreadyExists on a duplicate name
	GetInstance(ctx context.Context, name string) (*Instance, error)
	GetInstanceByUUID(ctx context.Context, uuid string) (*Instance, error)
	ListInstances(ctx context.Context, f Filter) ([]*Instance, error)
	// UpdateInstance saves all fields of in (matched by ID) but its
	// profiles (ProfileStore.SetInstanceProfiles).
	UpdateInstance(ctx context.Context, in *Instance) error
	// UpdateInstanceWithTimeline saves in and appends entries in one transaction.
	UpdateInstanceWithTimeline(ctx context.Context, in *Instance, entries ...*TimelineEntry) error
	DeleteInstance(ctx context.Context, id int64) error // also its timeline
	AppendTimeline(ctx context.Context, entries ...*TimelineEntry) error
	ListTimeline(ctx context.Context, instanceID int64, limit int) ([]*TimelineEntry, error) // oldest first, last `limit` entries
	// LastBecameReady returns the time of the newest timeline entry of boot
	// of the instance that records Ready going from "false" to "true"
	// (kind "ready"); ok is false when there is none.
	LastBecameReady(ctx context.Context, instanceID, boot int64) (at time.Time, ok bool, err error)
	// ClearReadyAll removes volatile.last_state.ready from every instance
	// (daemon start) and returns how many instances changed.
	ClearReadyAll(ctx context.Context) (int, error)
	// ClearReadyAt is ClearReadyAll for the instances of one cluster
	// member (location); "" means every instance.
	ClearReadyAt(ctx context.Context, location string) (int, error)
}

// ProfileStore keeps profiles. A Store that keeps profiles implements it;
// a nil return means the change is durable.
type ProfileStore interface {
	// CreateProfile stores p (sets p.ID); ErrAlreadyExists on a taken name.
	CreateProfile(ctx context.Context, p *Profile) error
	// Profile returns one profile (ErrNotFound).
	Profile(ctx context.Context, name string) (*Profile, error)
	// Profiles lists every profile by name.
	Profiles(ctx context.Context) ([]*Profile, error)
	// UpdateProfile saves p's description, config and devices (matched by
	// name; ErrNotFound).
	UpdateProfile(ctx context.Context, p *Profile) error
	// RenameProfile renames a profile and, in the same transaction, every
	// instance's reference to it (ErrNotFound, ErrAlreadyExists).
	RenameProfile(ctx context.Context, oldName, newName string) error
	// DeleteProfile removes a profile (ErrNotFound). The caller checks
	// that no instance uses it.
	DeleteProfile(ctx context.Context, name string) error
	// SetInstanceProfiles replaces the profiles of the instance of id
	// (ErrNotFound); UpdateInstance never writes them.
	SetInstanceProfiles(ctx context.Context, id int64, profiles []string) error
}

// SnapshotStore keeps instances' snapshots. A Store that keeps snapshots
// implements it; deleting an instance deletes its snapshots.
type SnapshotStore interface {
	// CreateSnapshot stores s (sets s.ID); ErrAlreadyExists if the
	// instance has a snapshot of that name.
	CreateSnapshot(ctx context.Context, s *Snapshot) error
	// Snapshots lists an instance's snapshots, oldest first.
	Snapshots(ctx context.Context, instanceID int64) ([]*Snapshot, error)
	// Snapshot returns the instance's snapshot called name.
	Snapshot(ctx context.Context, instanceID int64, name string) (*Snapshot, error)
	// RenameSnapshot renames a snapshot; ErrNotFound, ErrAlreadyExists.
	RenameSnapshot(ctx context.Context, instanceID int64, oldName, newName string) error
	// DeleteSnapshot deletes a snapshot; ErrNotFound if there is none.
	DeleteSnapshot(ctx context.Context, instanceID int64, name string) error
}
