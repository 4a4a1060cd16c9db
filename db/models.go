// Package db holds guestlink's persistent state: gorm models, versioned
// migrations and the Store the daemon uses. SQLite (pure Go, WAL) is the
// default; a postgres:// URL selects PostgreSQL for several hosts.
//
// The domain types are not db's: an instance, its timeline, snapshots and
// profiles are core/instance/record's, the event log's entries are
// core/events'. db implements their Store interfaces with private gorm
// models (instanceRow, timelineRow, eventRow, profileRow, snapshotRow) and
// converts at its edge, so no service sees a gorm type or a gorm error.
//
// The options WithRetention, WithInstanceEventRetention,
// WithInstanceEventFloor and WithMaxBatch are
// used only by tests and benchmarks (the daemon takes the defaults): they
// stay so that retention and group commit can be tested at small sizes.
package db

import (
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// Instance is the instance as stored: core/instance/record's type. The
// name stays for the store's cluster side (core/cluster, cluster.go),
// which names it through db.
type Instance = record.Instance

// InstanceFilter narrows ListInstances: core/instance/record's Filter.
type InstanceFilter = record.Filter

// instanceRow is the gorm model of table instances.
type instanceRow struct {
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
	Profiles   []string `gorm:"serializer:json"`
}

// TableName is the model's table.
func (instanceRow) TableName() string { return "instances" }

// instanceRowOf is the row of in; maps and slices are shared, not copied.
func instanceRowOf(in *record.Instance) *instanceRow {
	return &instanceRow{
		ID: in.ID, Name: in.Name, UUID: in.UUID, Backend: in.Backend,
		Config: in.Config, Devices: in.Devices, Handle: in.Handle,
		PowerState: in.PowerState, Boot: in.Boot, Location: in.Location,
		CreatedAt: in.CreatedAt, StartedAt: in.StartedAt, UpdatedAt: in.UpdatedAt,
		Profiles: in.Profiles,
	}
}

// record is the row as the domain's instance; maps and slices are shared.
func (r *instanceRow) record() *record.Instance {
	return &record.Instance{
		ID: r.ID, Name: r.Name, UUID: r.UUID, Backend: r.Backend,
		Config: r.Config, Devices: r.Devices, Handle: r.Handle,
		PowerState: r.PowerState, Boot: r.Boot, Location: r.Location,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, UpdatedAt: r.UpdatedAt,
		Profiles: r.Profiles,
	}
}

// timelineRow is the gorm model of table timeline_entries (rows are
// written by prepared statements, prepared.go; read through gorm).
type timelineRow struct {
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

// TableName is the model's table.
func (timelineRow) TableName() string { return "timeline_entries" }

// record is the row as the domain's timeline entry.
func (r *timelineRow) record() *record.TimelineEntry {
	return &record.TimelineEntry{ID: r.ID, InstanceID: r.InstanceID, Time: r.Time, Boot: r.Boot,
		Kind: r.Kind, From: r.From, To: r.To, Cause: r.Cause, Detail: r.Detail}
}

// eventRow is the gorm model of table events (rows are written by a
// prepared statement, prepared.go; read through gorm).
type eventRow struct {
	ID       int64     `gorm:"primaryKey;autoIncrement"`
	Time     time.Time `gorm:"index;not null"`
	Type     string    `gorm:"size:32;not null"`
	Instance string    `gorm:"size:63"`  // indexed with id (migration 202611230001)
	Body     []byte    `gorm:"not null"` // the event's JSON as sent to subscribers, minus its id
}

// TableName is the model's table.
func (eventRow) TableName() string { return "events" }

// record is the row as core/events' log record.
func (r *eventRow) record() *events.Record {
	return &events.Record{ID: r.ID, Time: r.Time, Type: r.Type, Instance: r.Instance, Body: r.Body}
}
