package instance

import (
	"fmt"
	"slices"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
)

// Condition types of an instance, in the order a view lists them.
const (
	CondAgentConnected = "AgentConnected"
	CondReady          = "Ready"
	CondDegraded       = "Degraded"
)

// Condition statuses (Kubernetes' shape).
const (
	CondTrue    = "True"
	CondFalse   = "False"
	CondUnknown = "Unknown"
)

// Reasons the daemon gives (a guest's own reason replaces the default of
// a declared state; see docs/readiness.md).
const (
	ReasonInstanceNotRunning   = "InstanceNotRunning"
	ReasonAgentConnected       = "AgentConnected"
	ReasonNoAgent              = "NoAgent"
	ReasonAgentStarted         = "AgentStarted"
	ReasonAgentStopped         = "AgentStopped"
	ReasonAgentLost            = "AgentLost"
	ReasonGuestDeclaredReady   = "GuestDeclaredReady"
	ReasonGuestDeclaredStarted = "GuestDeclaredStarted"
	ReasonNotDeclared          = "NotDeclared"
	ReasonDaemonRestarted      = "DaemonRestarted"
	ReasonTimeout              = "Timeout"
	ReasonGuestDeclaredDegrade = "GuestDeclaredDegraded"
	ReasonNotDegraded          = "NotDegraded"
)

// InstanceConditionChanged is the lifecycle action published when a
// condition's status or reason changes without another event of the
// instance to carry it; its context carries the changed conditions
// ({"conditions": [...]}).
const InstanceConditionChanged = "instance-condition-changed"

// Condition is one condition of an instance (Kubernetes' shape; Status is
// CondTrue, CondFalse or CondUnknown). It is the API's type itself, so a
// view's conditions go to the API without a copy (GET /1.0/instances of
// 10,000 running guests converted 30,000 of them).
type Condition = api.Condition

// Guest states a guest may declare with PATCH /1.0 (devlxd).
const (
	DeclaredReady    = "Ready"
	DeclaredStarted  = "Started"
	DeclaredDegraded = "Degraded"
)

// Declaration is what a guest declares of itself through devlxd PATCH
// /1.0: a state, and optionally why.
type Declaration struct {
	State   string // DeclaredReady, DeclaredStarted or DeclaredDegraded
	Reason  string
	Message string
	// Restore makes Declare a restoration of the boot's last declaration
	// (the agent handing it back to a restarted daemon): recorded only
	// while the boot has none (the Ready flag unset), so a declaration the
	// guest made meanwhile is never overwritten by an older one. Not kept.
	Restore bool
}

// deriveConditions derives the conditions of a record and runtime. A
// condition whose status did not change keeps its transition time from
// prev; a new or changed one gets def.
func deriveConditions(rec *record.Instance, rt *runtime, prev []Condition, def time.Time) []Condition {
	running := rec.PowerState == status.PowerRunning
	conds := []Condition{agentCondition(running, rt), readyCondition(rec, running, rt), degradedCondition(running, rt)}
	if c, ok := oomCondition(running, rt); ok {
		conds = append(conds, c)
	}
	for i := range conds {
		conds[i].LastTransitionTime = def
		for _, p := range prev {
			if p.Type == conds[i].Type && p.Status == conds[i].Status {
				conds[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return conds
}

func agentCondition(running bool, rt *runtime) Condition {
	c := Condition{Type: CondAgentConnected, Status: CondFalse}
	switch {
	case !running:
		c.Reason, c.Message = ReasonInstanceNotRunning, "the instance does not run"
	case rt.agent.State == AgentConnected:
		c.Status, c.Reason, c.Message = CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"
	case rt.agent.State == AgentStarted:
		c.Reason, c.Message = ReasonAgentStarted, "the agent started; no link to it yet"
	case rt.agent.State == AgentStopped:
		c.Reason, c.Message = ReasonAgentStopped, "the agent stopped"
	case rt.agent.State == AgentLost:
		c.Reason, c.Message = ReasonAgentLost, "the agent stopped answering"
	default:
		c.Reason, c.Message = ReasonNoAgent, "no agent seen this boot"
	}
	return c
}

func readyCondition(rec *record.Instance, running bool, rt *runtime) Condition {
	c := Condition{Type: CondReady, Status: CondFalse}
	d := rt.declared
	flag := rec.Config[KeyReady]
	switch {
	case !running:
		c.Reason, c.Message = ReasonInstanceNotRunning, "the instance does not run"
	case flag == "true":
		c.Status, c.Reason, c.Message = CondTrue, orDefault(d.Reason, ReasonGuestDeclaredReady), d.Message
		if d.State != DeclaredReady {
			c.Reason, c.Message = ReasonGuestDeclaredReady, ""
		}
	case rt.readyTimedOut:
		c.Reason = ReasonTimeout
		c.Message = fmt.Sprintf("not Ready %s after start (readiness.timeout)", rec.Config[KeyReadinessTimeout])
		if d.Reason != "" {
			c.Message += "; the guest says " + d.Reason
			if d.Message != "" {
				c.Message += ": " + d.Message
			}
		}
	case d.State == DeclaredDegraded:
		c.Reason, c.Message = orDefault(d.Reason, ReasonGuestDeclaredDegrade), d.Message
	case d.State == DeclaredStarted:
		c.Reason, c.Message = orDefault(d.Reason, ReasonGuestDeclaredStarted), d.Message
	case flag == "":
		c.Status, c.Reason, c.Message = CondUnknown, ReasonDaemonRestarted, "the daemon restarted; waiting for the guest to declare its state again"
	default:
		c.Reason, c.Message = ReasonNotDeclared, "the guest has not declared Ready"
	}
	return c
}

func degradedCondition(running bool, rt *runtime) Condition {
	c := Condition{Type: CondDegraded, Status: CondFalse, Reason: ReasonNotDegraded}
	if running && rt.declared.State == DeclaredDegraded {
		c.Status, c.Reason, c.Message = CondTrue, orDefault(rt.declared.Reason, ReasonGuestDeclaredDegrade), rt.declared.Message
	}
	return c
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// conditionsOf returns e's conditions; Manager.mu must be held. An entry
// no change touched since it was loaded derives them with its start (or
// creation) time as transition time.
func conditionsOf(rec *record.Instance, rt *runtime) []Condition {
	if rt.conds != nil {
		return rt.conds
	}
	def := rec.CreatedAt
	if rec.StartedAt != nil {
		def = *rec.StartedAt
	}
	return deriveConditions(rec, rt, nil, def)
}

// updateConditions derives c's conditions after its callback ran. The
// conditions whose status or reason changed are announced: in the context
// of the change's first event ("conditions": [...]), or, for a change that
// publishes nothing else, in an InstanceConditionChanged event of their own.
func (c *change) updateConditions(prev []Condition) {
	c.rt.conds = deriveConditions(c.rec, &c.rt, prev, c.now)
	var changed []Condition
	for _, n := range c.rt.conds {
		i := slices.IndexFunc(prev, func(p Condition) bool { return p.Type == n.Type })
		if i < 0 || prev[i].Status != n.Status || prev[i].Reason != n.Reason {
			changed = append(changed, n) // a new one (OutOfMemory) too
		}
	}
	if len(changed) == 0 || (c.quiet && len(c.events) == 0) {
		return
	}
	if len(c.events) == 0 {
		c.emit(InstanceConditionChanged, map[string]any{"conditions": changed}, byDaemon)
		return
	}
	ev := &c.events[0]
	l, err := ev.Lifecycle()
	if err != nil {
		return
	}
	if l.Context == nil {
		l.Context = map[string]any{}
	}
	l.Context["conditions"] = changed
	*ev = events.NewLifecycle(l.Action, ev.Instance, l.Context, l.Requestor)
	ev.Timestamp = c.now
}
