package contract

import "context"

// Capabilities of the snapshot and move contract (issue 16). They are
// versioned: a later, incompatible form gets a new name (".v2").
const (
	// CapSnapshot: the backend implements Snapshotter for stateless
	// snapshots (disks and whatever the backend keeps per guest).
	CapSnapshot Capability = "snapshot.v1"
	// CapSnapshotStateful: Snapshotter also takes and restores the memory
	// state of a running guest.
	CapSnapshotStateful Capability = "snapshot.stateful.v1"
	// CapMove: the backend implements Adopter and takes stopped guests of
	// the backends it names in its error messages (for QEMU: qemu and
	// qemu-legacy, whose handles and guest directories are the same).
	CapMove Capability = "move.v1"
)

// SnapshotInfo is what a backend stored for a snapshot.
type SnapshotInfo struct {
	DiskBytes  int64             // bytes of disk copies (0 for kernel-only guests)
	StateBytes int64             // bytes of the memory state (0 when stateless)
	Details    map[string]string // facts for users, e.g. "layout", "ring_port"
}

// RestoreOptions says how to restore a snapshot.
type RestoreOptions struct {
	// Stateful makes the snapshot's memory state the guest's saved state,
	// which the next Start with GuestSpec.RestoreState resumes. Without it,
	// any saved state of the guest is discarded.
	Stateful bool
	// CheckOnly checks that the snapshot exists and that its state can be
	// loaded (a state this backend cannot load is ErrConflict) and changes
	// nothing; the guest may run (the daemon stops it afterwards).
	CheckOnly bool
}

// Snapshotter is implemented by backends that announce CapSnapshot. The
// daemon keeps each snapshot's config and devices itself; a backend keeps
// the files (disk copies, memory state) under the guest it owns, and
// deletes them with the guest. Snapshot names are validated by the daemon
// (LXD's rules: no "/", not "." or "..", at most 63 bytes).
type Snapshotter interface {
	// SnapshotCreate snapshots the guest's disks (pausing a running guest
	// while they are copied) and, with stateful, its memory state (the
	// guest must run; it keeps running). An existing name is ErrConflict.
	SnapshotCreate(ctx context.Context, h Handle, name string, stateful bool) (*SnapshotInfo, error)
	// SnapshotRestore puts the snapshot back into the stopped guest (see
	// RestoreOptions). A running guest is ErrConflict, an unknown snapshot
	// ErrNotFound, a memory state the backend cannot load ErrConflict with
	// a message that says why and that a stateless restore works.
	SnapshotRestore(ctx context.Context, h Handle, name string, opts RestoreOptions) error
	// SnapshotDelete removes the snapshot's files; an unknown one succeeds.
	SnapshotDelete(ctx context.Context, h Handle, name string) error
	// SnapshotRename renames a snapshot: an unknown old name is
	// ErrNotFound, an existing new one ErrConflict.
	SnapshotRename(ctx context.Context, h Handle, oldName, newName string) error
}

// Adopter is implemented by backends that announce CapMove.
type Adopter interface {
	// Adopt takes over the stopped guest that backend from created (its
	// handle h), with its disks, saved state and snapshots, and returns
	// this backend's handle for it. A handle it cannot take is ErrInvalid
	// naming both backends; a running guest is ErrConflict.
	Adopt(ctx context.Context, h Handle, from string, spec *GuestSpec) (Handle, error)
}
