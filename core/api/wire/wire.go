// Package wire holds the JSON documents of guestlink's admin API: the LXD
// response envelope and the request and answer bodies. The server
// (core/api) and the Go client (core/client) share them; the package imports
// neither fiber nor any service.
package wire

import (
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// Response types of the envelope.
const (
	TypeSync  = "sync"
	TypeError = "error"
)

// Response is the LXD response envelope every admin API answer is wrapped in.
// Sync answers have Type "sync", Status "Success" and StatusCode 200; errors
// have Type "error", ErrorCode set to the HTTP status and Error to the message.
type Response struct {
	Type       string `json:"type"`
	Status     string `json:"status"`
	StatusCode int    `json:"status_code"`
	Operation  string `json:"operation"`
	ErrorCode  int    `json:"error_code"`
	Error      string `json:"error"`
	Metadata   any    `json:"metadata"`
}

// Sync returns the success envelope around metadata.
func Sync(metadata any) Response {
	return Response{Type: TypeSync, Status: "Success", StatusCode: 200, Metadata: metadata}
}

// Error returns the error envelope for an HTTP status code and a message.
func Error(code int, msg string) Response {
	return Response{Type: TypeError, ErrorCode: code, Error: msg}
}

// ServerInfo is the answer of GET /1.0.
type ServerInfo struct {
	APIVersion    string      `json:"api_version"` // "1.0"
	APIStatus     string      `json:"api_status"`  // "stable"
	APIExtensions []string    `json:"api_extensions"`
	Auth          string      `json:"auth"` // "trusted": the socket's permissions are the access control
	Public        bool        `json:"public"`
	Environment   Environment `json:"environment"`
}

// Environment describes the daemon answering GET /1.0.
type Environment struct {
	Server        string   `json:"server"` // "guestlink"
	ServerVersion string   `json:"server_version"`
	ServerPID     int      `json:"server_pid"`
	Backends      []string `json:"backends"` // names of the loaded backend plugins
}

// InstancesPost is the body of POST /1.0/instances.
type InstancesPost struct {
	Name    string                       `json:"name"`
	Backend string                       `json:"backend"`
	Config  map[string]string            `json:"config,omitempty"`
	Devices map[string]map[string]string `json:"devices,omitempty"`
	Start   bool                         `json:"start,omitempty"`
}

// InstancePatch is the body of PATCH /1.0/instances/{name}: keys to set and
// keys to remove.
type InstancePatch struct {
	Config map[string]string `json:"config,omitempty"`
	Unset  []string          `json:"unset,omitempty"`
}

// State actions of PUT /1.0/instances/{name}/state.
const (
	ActionStart   = "start"
	ActionStop    = "stop"
	ActionRestart = "restart"
)

// InstanceStatePut is the body of PUT /1.0/instances/{name}/state. Timeout is
// in seconds (0: the backend's default); Force and Stateful apply to stop and
// restart; Stateless applies to start: boot afresh, discarding a state a
// stateful stop saved (a start restores it otherwise).
type InstanceStatePut struct {
	Action    string `json:"action"`
	Timeout   int    `json:"timeout,omitempty"`
	Force     bool   `json:"force,omitempty"`
	Stateful  bool   `json:"stateful,omitempty"`
	Stateless bool   `json:"stateless,omitempty"`
}

// InstanceState is the answer of GET and PUT /1.0/instances/{name}/state.
type InstanceState struct {
	Status     string             `json:"status"`
	StatusCode int                `json:"status_code"`
	Ready      bool               `json:"ready"`
	Boot       int64              `json:"boot"`
	StartedAt  *time.Time         `json:"started_at"`
	ReadyAt    *time.Time         `json:"ready_at"`
	Link       string             `json:"link"`
	Agent      instance.AgentInfo `json:"agent"`
}

// StateOf returns the state part of an instance view.
func StateOf(inst *instance.Instance) InstanceState {
	return InstanceState{
		Status:     inst.Status,
		StatusCode: inst.StatusCode,
		Ready:      inst.Ready(),
		Boot:       inst.Boot,
		StartedAt:  inst.StartedAt,
		ReadyAt:    inst.ReadyAt,
		Link:       inst.Link,
		Agent:      inst.Agent,
	}
}

// Instance is the instance object of the API: the service's view plus, on
// GET /1.0/instances/{name}, a summary of its latest timeline entries (oldest
// first).
type Instance struct {
	instance.Instance
	Timeline []instance.TimelineEntry `json:"timeline,omitempty"`
}

// Backend is one backend plugin as listed by GET /1.0/backends.
type Backend struct {
	Name         string   `json:"name"`
	Path         string   `json:"path"`
	Version      string   `json:"version"`
	Capabilities []string `json:"capabilities"`
	Health       string   `json:"health"`
	Restarts     int      `json:"restarts"`
	LastError    string   `json:"last_error"`
	PID          int      `json:"pid"`
	// Failures counts the failed starts and early exits in a row; the
	// supervisor waits longer after each (up to a minute) and never gives up.
	Failures int `json:"failures"`
	// NextRetryAt is when the supervisor starts the plugin again, while it
	// waits; POST /1.0/backends/{name}/restart skips the wait.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	// SkippedChecks counts health checks not held against the plugin
	// because the daemon itself was saturated.
	SkippedChecks int `json:"skipped_checks"`
}
