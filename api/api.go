// Package api holds the JSON documents of guestlink's APIs: the LXD response
// envelope (admin API and devlxd alike) and the admin API's request and
// answer bodies. The server (transport/adminapi), the Go client (client) and devlxd
// (daemon and agent) share them; the package imports only the standard
// library, so a client links none of the server.
//
// api is a Go module of its own (github.com/guestlink/guestlink/api, api/go.mod)
// that requires nothing: a line importing the daemon's module does not
// compile here. The root module requires it at v0.0.0 with a replace to
// ./api, so both always build from the same tree.
package api

import "time"

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
	// Recovering counts the instances whose guests the daemon has not yet
	// recovered since it started (status Unknown meanwhile); 0 once its
	// start-up recovery is done.
	Recovering int `json:"recovering"`
}

// InstancesPost is the body of POST /1.0/instances.
type InstancesPost struct {
	Name    string                       `json:"name"`
	Backend string                       `json:"backend"`
	Config  map[string]string            `json:"config,omitempty"`
	Devices map[string]map[string]string `json:"devices,omitempty"`
	Start   bool                         `json:"start,omitempty"`
	// Image is the alias, fingerprint or fingerprint prefix of a store
	// image the guest boots from (see /1.0/images); "" for none.
	Image string `json:"image,omitempty"`
	// Profiles are applied in order under Config and Devices; absent (nil)
	// is ["default"], an empty list none (as LXD).
	Profiles []string `json:"profiles"`
	// Target is the cluster member to create the instance on, sent as the
	// ?target= query (as LXD); "" places it (docs/cluster.md).
	Target string `json:"-"`
}

// InstancePatch is the body of PATCH /1.0/instances/{name}: keys to set and
// keys to remove.
type InstancePatch struct {
	Config map[string]string `json:"config,omitempty"`
	Unset  []string          `json:"unset,omitempty"`
	// Profiles, when given alone, replaces the instance's profiles (an
	// empty list: none), as `guestlink profile assign`.
	Profiles *[]string `json:"profiles,omitempty"`
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
	Status     string     `json:"status"`
	StatusCode int        `json:"status_code"`
	Ready      bool       `json:"ready"`
	Boot       int64      `json:"boot"`
	StartedAt  *time.Time `json:"started_at"`
	ReadyAt    *time.Time `json:"ready_at"`
	Link       string     `json:"link"`
	Agent      AgentInfo  `json:"agent"`
	// Guest is what the agent reports of the guest (features, state);
	// nil when the agent is not connected.
	Guest *GuestInfo `json:"guest,omitempty"`
}

// Agent states of AgentInfo.State ("" when no agent was seen this boot or
// the instance is stopped).
const (
	AgentNone      = ""
	AgentStarted   = "started"
	AgentConnected = "connected"
	AgentStopped   = "stopped"
	AgentLost      = "lost"
)

// AgentInfo is the agent part of an instance object.
type AgentInfo struct {
	State         string     `json:"state"`
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	Since         *time.Time `json:"since"` // when State was entered
}

// Instance is the instance object of the API. Timeline, on
// GET /1.0/instances/{name} only, summarises its latest timeline entries
// (oldest first). Field names, order and omitempty are the wire format.
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
	Conditions   []Condition                  `json:"conditions"`              // AgentConnected, Ready, Degraded (readiness.go)
	// Location is the cluster member that runs the instance ("none"
	// outside a cluster, as LXD).
	Location string `json:"location"`
	// StatusReason says why Status is Unknown: its member is offline or
	// did not answer (docs/cluster.md).
	StatusReason string `json:"status_reason,omitempty"`
	// Profiles are the instance's profiles in the order they apply (as
	// LXD: later ones win, the instance's own config and devices over all).
	Profiles []string        `json:"profiles"`
	Timeline []TimelineEntry `json:"timeline,omitempty"`
	// IPv4 is the guest's first global IPv4 address as its agent last
	// reported it (GuestState.IPv4), "" when unknown.
	IPv4 string `json:"ipv4,omitempty"`
	// Guest is what the agent last reported of the guest (the cached
	// report; GET .../state asks the agent); nil when unknown.
	Guest *GuestInfo `json:"guest,omitempty"`
}

// Ready reports whether the instance's volatile.last_state.ready is "true".
func (i *Instance) Ready() bool { return i.Config["volatile.last_state.ready"] == "true" }

// TimelineEntry is one entry of GET /1.0/instances/{name}/timeline: a
// state, agent, ready or throttle change of one boot.
type TimelineEntry struct {
	Time   time.Time `json:"time"`
	Boot   int64     `json:"boot"`
	Kind   string    `json:"kind"` // "state", "agent", "ready", "throttle", "exec", "file"
	From   string    `json:"from"`
	To     string    `json:"to"`
	Cause  string    `json:"cause"` // "api", "devlxd", "backend", "daemon", "agent"
	Detail string    `json:"detail,omitempty"`
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
	// InstanceType is what the backend's guests are, as devlxd reports them
	// ("container" or "virtual-machine"); empty until the plugin started.
	InstanceType string `json:"instance_type,omitempty"`
	// Missing is what the running plugin reports the host lacks (health
	// "unhealthy": guests are neither created nor started on it), and
	// Problem says it in one sentence that names the fix: "qemu-img not
	// found in PATH (Debian package qemu-utils); install: apt-get install
	// qemu-utils". Both are empty for a usable backend.
	Missing []BackendMissing `json:"missing,omitempty"`
	Problem string           `json:"problem,omitempty"`
	// ConfigPrefixes are the instance config key prefixes the backend owns
	// ("sim."), and ConfigKeys the keys it declares under them, both from
	// the running plugin's Info. Only GET /1.0/backends/{name} fills them.
	ConfigPrefixes []string           `json:"config_prefixes,omitempty"`
	ConfigKeys     []BackendConfigKey `json:"config_keys,omitempty"`
}

// BackendConfigKey is one instance config key a backend declares: the
// daemon refuses any other key under the backend's prefixes.
type BackendConfigKey struct {
	Name    string `json:"name"`              // "sim.command"
	Type    string `json:"type"`              // "string", "int", "bool", "duration", "size", "path", "enum"
	Default string `json:"default,omitempty"` // what an unset key means (markdown)
	Doc     string `json:"doc,omitempty"`     // what the key does (markdown)
}

// BackendMissing is one thing a backend needs from the host and does not
// find there.
type BackendMissing struct {
	What    string `json:"what"`              // "qemu-img", "firmware bios-256k.bin"
	Reason  string `json:"reason,omitempty"`  // "not found in PATH"
	Package string `json:"package,omitempty"` // the Debian package that provides it
}

// ClusterMembersPost is the body of POST /1.0/cluster/members: the name of
// the member a join token is made for.
type ClusterMembersPost struct {
	Name string `json:"name"`
}

// ClusterJoinToken is the answer of POST /1.0/cluster/members: the
// one-time token the new member starts with (guestlinkd --join).
type ClusterJoinToken struct {
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ClusterMember is one member of GET /1.0/cluster/members.
type ClusterMember struct {
	Name         string    `json:"name"`
	Address      string    `json:"address"`
	Version      string    `json:"version"`
	Backends     []string  `json:"backends"`
	Heartbeat    time.Time `json:"heartbeat"`
	HeartbeatAge float64   `json:"heartbeat_age"` // seconds
	Status       string    `json:"status"`        // online, offline, or fenced (shown by a member whose lease is gone)
	StatusReason string    `json:"status_reason,omitempty"`
	Instances    int       `json:"instances"`
	Self         bool      `json:"self"`
	Epoch        int64     `json:"epoch"` // the generation of its membership (docs/cluster.md, "Ownership")
}

// ClusterMemberRemoved is the answer to DELETE /1.0/cluster/members/{name}:
// the instances still recorded at the removed member (a forced removal
// leaves them; they show Unknown until deleted or until a daemon joins
// under that name).
type ClusterMemberRemoved struct {
	Name          string   `json:"name"`
	InstancesLeft []string `json:"instances_left"`
}
