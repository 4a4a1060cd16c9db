package instance

import "github.com/guestlink/guestlink/api"

// The admin API and the dashboard answer in the wire types of package api,
// which import nothing of the server; these functions convert the service's
// views into them, so both edges share one conversion. The JSON must stay
// what encoding/json made of the service's types
// (transport/adminapi's TestWireInstanceMatchesServiceJSON guards it).

// WireInstance returns the API object of inst with the timeline summary tl
// (nil: none). The maps are shared with inst, not copied.
func WireInstance(inst *Instance, tl []TimelineEntry) api.Instance {
	return api.Instance{
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
		Agent:        wireAgent(inst.Agent),
		DevlxdSocket: inst.DevlxdSocket,
		Details:      inst.Details,
		Timeline:     WireTimeline(tl),
		Conditions:   WireConditions(inst.Conditions),
		Location:     inst.Location,
		StatusReason: inst.StatusReason,
		Profiles:     inst.Profiles,
		IPv4:         inst.GuestIPv4, // another member's report; the local list fills its own
	}
}

// wireAgent returns the API form of an instance's agent part.
func wireAgent(a AgentInfo) api.AgentInfo {
	return api.AgentInfo{State: string(a.State), LastHeartbeat: a.LastHeartbeat, Since: a.Since}
}

// WireState returns the API form of the state part of inst.
func WireState(inst *Instance) api.InstanceState {
	return api.InstanceState{
		Status:     inst.Status,
		StatusCode: inst.StatusCode,
		Ready:      inst.Ready(),
		Boot:       inst.Boot,
		StartedAt:  inst.StartedAt,
		ReadyAt:    inst.ReadyAt,
		Link:       inst.Link,
		Agent:      wireAgent(inst.Agent),
	}
}

// WireConditions returns the API form of an instance's conditions: the same
// slice, Condition being the API's type (nil stays nil).
func WireConditions(cs []Condition) []api.Condition { return cs }

// WireTimeline returns the API form of timeline entries; nil stays nil and
// empty stays empty.
func WireTimeline(tl []TimelineEntry) []api.TimelineEntry {
	if tl == nil {
		return nil
	}
	out := make([]api.TimelineEntry, len(tl))
	for i, e := range tl {
		out[i] = api.TimelineEntry{Time: e.Time, Boot: e.Boot, Kind: e.Kind, From: e.From, To: e.To, Cause: e.Cause, Detail: e.Detail}
	}
	return out
}

// InstanceFromWire returns the view an API instance object describes: the
// inverse of WireInstance for what a view holds (a cluster member's answer
// about its instances, core/cluster). The timeline, the IPv4 address and
// the guest report of the API object are not part of a view and are
// dropped; the maps and slices are shared with w, not copied.
func InstanceFromWire(w *api.Instance) *Instance {
	return &Instance{
		Name:         w.Name,
		UUID:         w.UUID,
		Backend:      w.Backend,
		Status:       w.Status,
		StatusCode:   w.StatusCode,
		Config:       w.Config,
		Devices:      w.Devices,
		Boot:         w.Boot,
		CreatedAt:    w.CreatedAt,
		StartedAt:    w.StartedAt,
		ReadyAt:      w.ReadyAt,
		Link:         w.Link,
		Agent:        AgentInfo{State: AgentState(w.Agent.State), LastHeartbeat: w.Agent.LastHeartbeat, Since: w.Agent.Since},
		DevlxdSocket: w.DevlxdSocket,
		Details:      w.Details,
		Conditions:   w.Conditions,
		Location:     w.Location,
		StatusReason: w.StatusReason,
		Profiles:     w.Profiles,
		GuestIPv4:    w.IPv4,
	}
}
