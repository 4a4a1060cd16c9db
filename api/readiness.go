package api

import "time"

// Condition types of an instance (docs/readiness.md).
const (
	ConditionAgentConnected = "AgentConnected"
	ConditionReady          = "Ready"
	ConditionDegraded       = "Degraded"
)

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Condition is one condition of an instance, in Kubernetes' shape: whether
// it holds (True, False, Unknown), a CamelCase reason, a human message and
// when its status last changed.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

// What GET /1.0/instances/{name}/wait?for= waits for.
const (
	WaitReady          = "ready"
	WaitAgentConnected = "agent-connected"
	WaitRunning        = "running"
	WaitStopped        = "stopped"
)

// Outcomes of a wait (InstanceWait.Outcome).
const (
	// WaitMet: the condition holds.
	WaitMet = "met"
	// WaitTimeout: the timeout passed first.
	WaitTimeout = "timeout"
	// WaitStoppedOutcome: the instance is or went stopped, so the condition
	// cannot come true.
	WaitStoppedOutcome = "stopped"
	// WaitFailed: the instance is or went in Error.
	WaitFailed = "failed"
	// WaitDeleted: the instance was deleted while waiting.
	WaitDeleted = "deleted"
)

// InstanceWait is the answer of GET /1.0/instances/{name}/wait: how the
// wait ended, after how long, and the instance's status and conditions
// then (empty when deleted).
type InstanceWait struct {
	Instance   string      `json:"instance"`
	For        string      `json:"for"`
	Outcome    string      `json:"outcome"`
	WaitedMS   int64       `json:"waited_ms"`
	Status     string      `json:"status"`
	StatusCode int         `json:"status_code"`
	Conditions []Condition `json:"conditions"`
}
