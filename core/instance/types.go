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
	State         AgentState
	LastHeartbeat *time.Time
	Since         *time.Time // when State was entered
}

// Instance is the view of one instance that the API, the dashboard and the
// guest-link services read. It is a copy: changing it changes nothing.
type Instance struct {
	Name         string
	UUID         string
	Backend      string
	Status       string
	StatusCode   int
	Config       map[string]string
	Devices      map[string]map[string]string
	Boot         int64
	CreatedAt    time.Time
	StartedAt    *time.Time
	ReadyAt      *time.Time // when this boot last became Ready
	Link         string     // "hybrid", "vsock", "serial" or ""
	Agent        AgentInfo
	DevlxdSocket string            // simulated guests
	Details      map[string]string // backend facts
	Conditions   []Condition       // shared: never change it
	// Location is the cluster member that runs the instance; "none"
	// outside a cluster (as LXD).
	Location string
	// StatusReason says why Status is Unknown (its member is offline).
	StatusReason string
	// Profiles are the instance's profiles, in the order they apply
	// (shared: never change it).
	Profiles []string
	// GuestIPv4 is the guest's address as the cluster member that runs the
	// instance reported it with the instance (its agent's cached report);
	// "" for this member's own instances, whose address the admin API's
	// list reads from the local agent cache.
	GuestIPv4 string
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
