package events

// Lifecycle actions of snapshots and moves (issue 16). Their source is the
// instance (/1.0/instances/<name>); context: "snapshot" (its name),
// "stateful", and for a rename "old_name"; for a move "from" and "to".
const (
	InstanceSnapshotCreated  = "instance-snapshot-created"
	InstanceSnapshotDeleted  = "instance-snapshot-deleted"
	InstanceSnapshotRenamed  = "instance-snapshot-renamed"
	InstanceSnapshotRestored = "instance-snapshot-restored"
	InstanceMoved            = "instance-moved"
)
