package api

import (
	wire "github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// The API answers in the wire types of package api, which import nothing of
// the server; these functions convert the instance service's views into
// them. The JSON must stay what encoding/json made of the service's types
// (TestWireInstanceMatchesServiceJSON guards it).

// instanceOf returns the API object of inst with the timeline summary tl
// (nil: none). The maps are shared with inst, not copied.
func instanceOf(inst *instance.Instance, tl []instance.TimelineEntry) wire.Instance {
	return wire.Instance{
		Name:         inst.Name,
		UUID:         inst.UUID,
		Backend:      inst.Backend,
		Status:       inst.Status,
		StatusCode:   inst.StatusCode,
		Config:       inst.Config,
		Devices:      inst.Devices,
		Boot:         inst.Boot,
		CreatedAt:    inst.CreatedAt,
		StartedAt:    inst.StartedAt,
		ReadyAt:      inst.ReadyAt,
		Link:         inst.Link,
		Agent:        agentOf(inst.Agent),
		DevlxdSocket: inst.DevlxdSocket,
		Details:      inst.Details,
		Timeline:     timelineOf(tl),
	}
}

// agentOf returns the API form of an instance's agent part.
func agentOf(a instance.AgentInfo) wire.AgentInfo {
	return wire.AgentInfo{State: string(a.State), LastHeartbeat: a.LastHeartbeat, Since: a.Since}
}

// stateOf returns the state part of an instance view.
func stateOf(inst *instance.Instance) wire.InstanceState {
	return wire.InstanceState{
		Status:     inst.Status,
		StatusCode: inst.StatusCode,
		Ready:      inst.Ready(),
		Boot:       inst.Boot,
		StartedAt:  inst.StartedAt,
		ReadyAt:    inst.ReadyAt,
		Link:       inst.Link,
		Agent:      agentOf(inst.Agent),
	}
}

// timelineOf returns the API form of timeline entries; nil stays nil and
// empty stays empty.
func timelineOf(tl []instance.TimelineEntry) []wire.TimelineEntry {
	if tl == nil {
		return nil
	}
	out := make([]wire.TimelineEntry, len(tl))
	for i, e := range tl {
		out[i] = wire.TimelineEntry{Time: e.Time, Boot: e.Boot, Kind: e.Kind, From: e.From, To: e.To, Cause: e.Cause, Detail: e.Detail}
	}
	return out
}
