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

// Requestor says who caused an event.
type Requestor struct {
	Username string `json:"username"`
	Protocol string `json:"protocol"` // "unix", "tls", "bearer", "session", "devlxd", "agent", "backend", "daemon", "systemd"
	Address  string `json:"address"`
	// UID is the peer's uid on the admin socket (protocol unix).
	UID string `json:"uid,omitempty"`
	// Fingerprint is the SHA-256 of the client certificate (protocol tls).
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Lifecycle is the metadata of a lifecycle event.
type Lifecycle struct {
	Action    string         `json:"action"`
	Source    string         `json:"source"` // "/1.0/instances/<name>"
	Context   map[string]any `json:"context"`
	Requestor *Requestor     `json:"requestor,omitempty"`
}

// Event is one event as sent to subscribers (LXD's shape plus id).
type Event struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Project   string          `json:"project"`
	Location  string          `json:"location"`
	Instance  string          `json:"-"` // instance name, for filtering ("" = none)
	Metadata  json.RawMessage `json:"metadata"`
}
