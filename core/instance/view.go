package instance

import (
	"maps"
	"slices"
	"time"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
)

// The status of an instance whose guest the daemon has not yet recovered
// since it started (the admin API and the dashboard answer during the
// recovery): Unknown, code 0, as a cluster shows an offline member's
// instances, with this reason.
const (
	StatusUnknown    = "Unknown"
	ReasonRecovering = "the daemon is recovering its guest after a restart"
)

// statusOf derives an entry's status; Manager.mu must be held.
func statusOf(e *entry) status.Code {
	return statusOfState(e.rec, &e.rt)
}

// statusOfState derives the status of a record and runtime.
func statusOfState(rec *record.Instance, rt *runtime) status.Code {
	return status.Derive(rec.PowerState, rec.Config[KeyReady] == "true", rt.op)
}

// viewOf builds the Instance view of an entry; Manager.mu must be held.
func viewOf(e *entry) *Instance {
	inst := new(Instance)
	rt := e.rt
	rt.agent.LastHeartbeat = e.heartbeatOf(rt.agent.LastHeartbeat)
	fillView(inst, e.rec, &rt, false)
	return inst
}

// ViewOfRecord is the view of a stored instance alone, without the
// runtime state only its own daemon knows (agent, link, conditions): what
// a cluster member shows of another member's instance it cannot ask.
func ViewOfRecord(rec *record.Instance) *Instance {
	inst := new(Instance)
	fillView(inst, rec, &runtime{}, false)
	return inst
}

// noDevices is the Devices of shared views of entries without devices.
var noDevices = map[string]map[string]string{}

// noProfiles is the Profiles of views of instances without profiles.
var noProfiles = []string{}

// noConfig is the Config of shared views of entries without config.
var noConfig = map[string]string{}

// fillView fills inst with the view of an entry's record and runtime (taken
// under Manager.mu, or a snapshot). A shared view (ListFunc) points at the
// entry's maps and times instead of copies of them.
func fillView(inst *Instance, rec *record.Instance, rt *runtime, shared bool) {
	code := statusOfState(rec, rt)
	*inst = Instance{
		Name:       rec.Name,
		UUID:       rec.UUID,
		Backend:    rec.Backend,
		Status:     code.String(),
		StatusCode: int(code),
		Boot:       rec.Boot,
		CreatedAt:  rec.CreatedAt,
		Link:       rt.link,
		Agent: AgentInfo{
			State: rt.agent.State,
		},
		DevlxdSocket: rt.details["devlxd_socket"],
		Conditions:   conditionsOf(rec, rt),
		Location:     rec.Location,
		Profiles:     rec.Profiles,
	}
	if !shared {
		inst.Profiles = slices.Clone(rec.Profiles)
	}
	if inst.Profiles == nil {
		inst.Profiles = noProfiles
	}
	if inst.Location == "" {
		inst.Location = LocationNone
	}
	if rt.unrecovered {
		inst.Status, inst.StatusCode, inst.StatusReason = StatusUnknown, 0, ReasonRecovering
	}
	if shared {
		inst.Config, inst.Devices = rec.Config, rec.Devices
		inst.StartedAt, inst.ReadyAt = rec.StartedAt, rt.readyAt
		inst.Agent.LastHeartbeat, inst.Agent.Since = rt.agent.LastHeartbeat, rt.agent.Since
		if inst.Devices == nil {
			inst.Devices = noDevices
		}
		if len(rt.details) > 0 {
			inst.Details = rt.details
		}
		if inst.Config == nil {
			inst.Config = noConfig
		}
		return
	}
	inst.Config = maps.Clone(rec.Config)
	inst.Devices = cloneDevices(rec.Devices)
	inst.StartedAt, inst.ReadyAt = cloneTime(rec.StartedAt), cloneTime(rt.readyAt)
	inst.Agent.LastHeartbeat, inst.Agent.Since = cloneTime(rt.agent.LastHeartbeat), cloneTime(rt.agent.Since)
	if inst.Config == nil {
		inst.Config = map[string]string{}
	}
	if len(rt.details) > 0 {
		inst.Details = maps.Clone(rt.details)
	}
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func cloneDevices(d map[string]map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string, len(d))
	for k, v := range d {
		out[k] = maps.Clone(v)
	}
	return out
}

func cloneRec(r *record.Instance) *record.Instance {
	c := *r
	c.Config = maps.Clone(r.Config)
	if c.Config == nil {
		c.Config = map[string]string{}
	}
	c.Devices = cloneDevices(r.Devices)
	c.Handle = slices.Clone(r.Handle)
	c.StartedAt = cloneTime(r.StartedAt)
	c.Profiles = slices.Clone(r.Profiles)
	return &c
}

func (rt runtime) clone() runtime {
	c := rt
	c.details = maps.Clone(rt.details)
	c.agent.LastHeartbeat = cloneTime(rt.agent.LastHeartbeat)
	c.agent.Since = cloneTime(rt.agent.Since)
	c.readyAt = cloneTime(rt.readyAt)
	// conds is replaced, never changed in place: it may be shared.
	return c
}
