package cluster

import (
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// memberWireInstances are the instances of the fixture
// testdata/member-instances-v1.json: one with every field set, one as a
// stopped guest has it, one zero (nil maps and slices).
func memberWireInstances() []*instance.Instance {
	t1 := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	t2 := time.Date(1999, 1, 2, 3, 4, 5, 0, time.UTC)
	return []*instance.Instance{
		{
			Name: "web1", UUID: "0b7c7d0e-1f2e-4d3c-8b4a-0123456789ab", Backend: "sim", Status: "Ready", StatusCode: 113,
			Config:  map[string]string{"volatile.last_state.ready": "true", "user.x": "<&>\"é"},
			Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}, "eth0": {"type": "nic"}},
			Boot:    3, CreatedAt: t1, StartedAt: &t2, ReadyAt: &t1, Link: "vsock",
			Agent:        instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &t1, Since: &t2},
			DevlxdSocket: "/run/x/sock", Details: map[string]string{"pid": "42"},
			Conditions: []instance.Condition{
				{Type: instance.CondAgentConnected, Status: instance.CondTrue, Reason: "Connected", Message: "m", LastTransitionTime: t1},
				{Type: instance.CondReady, Status: instance.CondFalse, Reason: "NotDeclared", LastTransitionTime: t2},
			},
			Location: "b", StatusReason: "", Profiles: []string{"default", "web"},
		},
		{
			Name: "db1", UUID: "u-2", Backend: "qemu", Status: "Stopped", StatusCode: 102,
			Config: map[string]string{}, Devices: map[string]map[string]string{}, CreatedAt: t2,
			Agent: instance.AgentInfo{State: instance.AgentNone}, Conditions: []instance.Condition{},
			Location: "b", StatusReason: "member b is offline (last heartbeat 2026-11-22T01:02:03Z)", Profiles: []string{},
		},
		{},
	}
}
