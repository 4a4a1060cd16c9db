// Package instance is the daemon's instance service: it creates, starts,
// stops and deletes guests through their backend plugins, derives each
// instance's status (including Ready), keeps its timeline and publishes its
// lifecycle events. It knows nothing of HTTP.
package instance

import (
	"time"
)

// AgentState is what the daemon knows of a guest's agent.
type AgentState string

// Agent states. AgentNone: no agent seen this boot (or the instance is stopped).
const (
	AgentNone      AgentState = ""
	AgentStarted   AgentState = "started"
	AgentConnected AgentState = "connected"
	AgentStopped   AgentState = "stopped"
	AgentLost      AgentState = "lost"
)

// AgentInfo is the agent part of an instance view.
type AgentInfo struct {
	State         AgentState `json:"state"`
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	Since         *time.Time `json:"since"` // when State was entered
}

// Instance is the view of one instance that the API, the dashboard and the
// guest-link services read. It is a copy: changing it changes nothing.
type Instance struct {
	Name         string                       `json:"name"`
	UUID         string                       `json:"uuid"`
	Backend      string                       `json:"backend"`
	Status       string                       `json:"status"`
	StatusCode   int                          `json:"status_code"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Boot         int64                        `json:"boot"`
	CreatedAt    time.Time                    `json:"created_at"`
	StartedAt    *time.Time                   `json:"started_at"`
	ReadyAt      *time.Time                   `json:"ready_at"` // when this boot last became Ready
	Link         string                       `json:"link"`     // "hybrid", "vsock", "serial" or ""
	Agent        AgentInfo                    `json:"agent"`
	DevlxdSocket string                       `json:"devlxd_socket,omitempty"` // simulated guests
	Details      map[string]string            `json:"details,omitempty"`       // backend facts
	Conditions   []Condition                  `json:"conditions"`              // shared: never change it
	// Location is the cluster member that runs the instance; "none"
	// outside a cluster (as LXD).
	Location string `json:"location"`
	// StatusReason says why Status is Unknown (its member is offline).
	StatusReason string `json:"status_reason,omitempty"`
	// Profiles are the instance's profiles, in the order they apply
	// (shared: never change it).
	Profiles []string `json:"profiles"`
}

// LocationNone is the Location of instances outside a cluster (as LXD).
const LocationNone = "none"

// Ready reports whether the instance's volatile.last_state.ready is "true".
func (i *Instance) Ready() bool { return i.Config["volatile.last_state.ready"] == "true" }

// ImageError is a create request's error about the image it names: no
// image matches (errdefs.ErrNotFound), the daemon has no image store or the
// backend cannot boot from one (errdefs.ErrInvalid). Forms use it to put
// the message beside the image field; it wraps its cause unchanged.
type ImageError struct{ Err error }

// Error returns the cause's message.
func (e *ImageError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, so errors.Is sees its errdefs class.
func (e *ImageError) Unwrap() error { return e.Err }
