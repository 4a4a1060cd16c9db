package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event types of GET /1.0/events.
const (
	EventTypeLifecycle = "lifecycle"
	EventTypeLogging   = "logging"
)

// Event is one message of GET /1.0/events (LXD's shape plus a monotonic id,
// the resume point of ?since=).
type Event struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Project   string          `json:"project"`
	Location  string          `json:"location"`
	Metadata  json.RawMessage `json:"metadata"`
	// Instance is the name of the instance a lifecycle event is about ("" =
	// none); not on the wire, the client fills it from the metadata's source.
	Instance string `json:"-"`
}

// EventRequestor says who caused an event.
type EventRequestor struct {
	Username string `json:"username"`
	Protocol string `json:"protocol"` // "unix", "tls", "bearer", "session", "devlxd", "agent", "backend", "daemon"
	Address  string `json:"address"`
	// UID is the peer's uid on the admin socket (protocol unix).
	UID string `json:"uid,omitempty"`
	// Fingerprint is the SHA-256 of the client certificate (protocol tls).
	Fingerprint string `json:"fingerprint,omitempty"`
}

// EventLifecycle is the metadata of a lifecycle event.
type EventLifecycle struct {
	Action    string          `json:"action"`
	Source    string          `json:"source"` // "/1.0/instances/<name>"
	Context   map[string]any  `json:"context"`
	Requestor *EventRequestor `json:"requestor,omitempty"`
}

// Lifecycle decodes the metadata of a lifecycle event.
func (e Event) Lifecycle() (EventLifecycle, error) {
	var l EventLifecycle
	if e.Type != EventTypeLifecycle {
		return l, fmt.Errorf("decoding event %d: type %q is not %q", e.ID, e.Type, EventTypeLifecycle)
	}
	if err := json.Unmarshal(e.Metadata, &l); err != nil {
		return l, fmt.Errorf("decoding event %d lifecycle metadata: %w", e.ID, err)
	}
	return l, nil
}
