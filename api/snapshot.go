package api

import "time"

// InstanceSnapshot is one snapshot of an instance
// (GET /1.0/instances/{name}/snapshots[/{snap}]).
type InstanceSnapshot struct {
	Name      string                       `json:"name"`
	CreatedAt time.Time                    `json:"created_at"`
	Stateful  bool                         `json:"stateful"` // holds the guest's memory state
	Running   bool                         `json:"running"`  // the guest ran when it was taken
	Ready     bool                         `json:"ready"`    // the guest was Ready when it was taken
	Backend   string                       `json:"backend"`  // the backend that took it
	Config    map[string]string            `json:"config"`
	Devices   map[string]map[string]string `json:"devices"`
	Size      int64                        `json:"size"`       // bytes of disk copies
	StateSize int64                        `json:"state_size"` // bytes of memory state
	// Details are the backend's facts, e.g. "layout" and "ring_port": the
	// serial layout a QEMU state was saved under.
	Details map[string]string `json:"details,omitempty"`
	// Consistency is "filesystem" (the guest's filesystems were frozen
	// through its agent while the snapshot was taken), "crash" (the guest
	// ran unfrozen: its disks are as a power cut leaves them) or "stopped"
	// (the guest was not running).
	Consistency string `json:"consistency"`
	// ConsistencyDetail says why: what was frozen, or why nothing was.
	ConsistencyDetail string `json:"consistency_detail,omitempty"`
}

// InstanceSnapshotsPost creates a snapshot (POST /1.0/instances/{name}/snapshots).
type InstanceSnapshotsPost struct {
	Name     string `json:"name"`
	Stateful bool   `json:"stateful,omitempty"`
	// NoFreeze takes the snapshot of a running guest without freezing its
	// filesystems through its agent (crash-consistent).
	NoFreeze bool `json:"no_freeze,omitempty"`
}

// InstanceSnapshotPost renames a snapshot (POST /1.0/instances/{name}/snapshots/{snap}).
type InstanceSnapshotPost struct {
	Name string `json:"name"`
}

// InstancePut restores a snapshot (PUT /1.0/instances/{name}), as LXD's
// {"restore": "snap0", "stateful": true}.
type InstancePut struct {
	Restore  string `json:"restore"`
	Stateful bool   `json:"stateful,omitempty"`
}

// InstancePost moves a stopped instance to another backend
// (POST /1.0/instances/{name}); Name, if given, must be the instance's own
// (renaming is not supported).
type InstancePost struct {
	Name    string `json:"name,omitempty"`
	Backend string `json:"backend"`
}
