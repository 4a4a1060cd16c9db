// Package events is the daemon's event bus: every event gets a monotonic id,
// is written to the event log, and is delivered to filtered subscribers,
// which may resume after the last id they saw without missing anything.
//
// The options WithBuffer, WithBacklog and WithWriteRetry are used only by
// tests (the daemon takes the defaults): they stay so that tests can make
// subscriptions overflow and store writes fail within milliseconds.
package events

import (
	"encoding/json"
	"time"
)

// Event types.
const (
	TypeLifecycle = "lifecycle"
	TypeLogging   = "logging"
)

// Lifecycle actions (docs/spec/status.md).
const (
	InstanceCreated        = "instance-created"
	InstanceStarted        = "instance-started"
	InstanceStopped        = "instance-stopped"
	InstanceRestarted      = "instance-restarted"
	InstanceDeleted        = "instance-deleted"
	InstanceUpdated        = "instance-updated"
	InstanceReady          = "instance-ready"
	InstanceUnready        = "instance-unready"
	InstanceAgentStarted   = "instance-agent-started"
	InstanceAgentConnected = "instance-agent-connected"
	InstanceAgentStopped   = "instance-agent-stopped"
	InstanceAgentLost      = "instance-agent-lost"
	InstanceError          = "instance-error"
	// InstanceThrottled says a guest went over one of its budgets (ring
	// reads, state changes): what it sent beyond is dropped. It comes once
	// per throttling episode; context: budget, detail.
	InstanceThrottled = "instance-throttled"
)

// Requestor says who caused an event. It has no wire form of its own: it
// is stored in a lifecycle event's metadata as the events domain's private
// JSON (lifecycle.go), sent to clients as api.EventRequestor and between
// cluster members as the same (the admin API converts it).
type Requestor struct {
	Username string
	Protocol string // "unix", "tls", "bearer", "session", "devlxd", "agent", "backend", "daemon", "systemd"
	Address  string
	// UID is the peer's uid on the admin socket (protocol unix).
	UID string
	// Fingerprint is the SHA-256 of the client certificate (protocol tls).
	Fingerprint string
}

// Lifecycle is the metadata of a lifecycle event. Event.Metadata holds it
// encoded (NewLifecycle) in the events domain's stored form, the JSON LXD
// sends; Event.Lifecycle and DecodeLifecycle read it back.
type Lifecycle struct {
	Action    string
	Source    string // "/1.0/instances/<name>"
	Context   map[string]any
	Requestor *Requestor
}

// Event is one event of the bus (LXD's shape plus id). It is stored as the
// bus's private JSON (Record.Body) and sent to clients as api.Event (the
// admin API converts it).
type Event struct {
	ID        int64
	Type      string
	Timestamp time.Time
	Project   string
	Location  string
	Instance  string          // instance name, for filtering ("" = none); never sent
	Metadata  json.RawMessage // the type's metadata as JSON (a lifecycle event's: see Lifecycle)
}
