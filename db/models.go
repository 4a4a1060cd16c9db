// Package db holds guestlink's persistent state: gorm models, versioned
// migrations and the Store the daemon uses. SQLite (pure Go, WAL) is the
// default; a postgres:// URL selects PostgreSQL for several hosts.
//
// The options WithRetention, WithInstanceEventRetention,
// WithInstanceEventFloor and WithMaxBatch are
// used only by tests and benchmarks (the daemon takes the defaults): they
// stay so that retention and group commit can be tested at small sizes.
package db

import "time"

// Instance is one guest as stored.
type Instance struct {
	ID         int64                        `gorm:"primaryKey"`
	Name       string                       `gorm:"uniqueIndex;size:63;not null"`
	UUID       string                       `gorm:"uniqueIndex;size:36;not null"`
	Backend    string                       `gorm:"index;size:64;not null"`
	Config     map[string]string            `gorm:"serializer:json;not null"` // includes volatile.*, user.*, backend keys
	Devices    map[string]map[string]string `gorm:"serializer:json;not null"`
	Handle     []byte                       // the plugin's opaque handle
	PowerState string                       `gorm:"index;size:16;not null"`            // "stopped", "running", "error"
	Boot       int64                        `gorm:"not null;default:0"`                // +1 at every start
	Location   string                       `gorm:"index;size:63;not null;default:''"` // the cluster member that runs it ("" outside a cluster)
	CreatedAt  time.Time
	StartedAt  *time.Time
	UpdatedAt  time.Time
	// Profiles are the names of the profiles applied to the instance, in
	// order (later ones win; Config and Devices win over all of them).
	Profiles []string `gorm:"serializer:json"`
}

// TimelineEntry is one change in an instance's life: its state, its agent's
// state or its Ready flag, with the time and who caused it.
type TimelineEntry struct {
	ID         int64     `gorm:"primaryKey"`
	InstanceID int64     `gorm:"index:idx_timeline_instance,priority:1;not null"`
	Time       time.Time `gorm:"index:idx_timeline_instance,priority:2;not null"`
	Boot       int64     `gorm:"not null"`
	Kind       string    `gorm:"size:16;not null"` // "state", "agent", "ready", "throttle"
	From       string    `gorm:"size:32"`
	To         string    `gorm:"size:32;not null"`
	Cause      string    `gorm:"size:64"` // "api", "devlxd", "backend", "daemon", "agent"
	Detail     string
}

// Event is one entry of the event log; ID is monotonic and is the resume
// point for event subscribers.
type Event struct {
	ID       int64     `gorm:"primaryKey;autoIncrement"`
	Time     time.Time `gorm:"index;not null"`
	Type     string    `gorm:"size:32;not null"`
	Instance string    `gorm:"size:63"`  // indexed with id (migration 202611230001)
	Body     []byte    `gorm:"not null"` // the event's JSON as sent to subscribers, minus its id
}
