package adminapi

import (
	"fmt"
	"strconv"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// FleetViews returns n views shaped like the daemon's running fleet guests
// (GET /1.0/instances of `make bench-fleet` before the Ready storm): agent
// connected with its heartbeat and since times, link details, three
// conditions with their transition times; every fourth guest is Ready. The
// views share nothing, as the manager's views of different entries.
func FleetViews(n int) []*instance.Instance {
	base := time.Date(2026, 11, 27, 1, 28, 57, 333776222, time.UTC)
	list := make([]*instance.Instance, n)
	for i := range list {
		name := "f-" + strconv.Itoa(i)
		uuid := fmt.Sprintf("%08x-f31d-4349-8cb2-d85ea7ac8899", i)
		dir := fmt.Sprintf("/tmp/glb3902819647/plugins/fleet/guests/%s-%08x", name, i*7919)
		created := base.Add(time.Duration(i) * 13 * time.Millisecond)
		started := created.Add(61216797 * time.Nanosecond)
		since := started.Add(28673758 * time.Nanosecond)
		beat := since.Add(5*time.Second + 12345*time.Nanosecond)
		ready := "false"
		status, code := "Running", 103
		readyCond := instance.Condition{Type: instance.CondReady, Status: instance.CondFalse, Reason: instance.ReasonNotDeclared,
			Message: "the guest has not declared Ready", LastTransitionTime: created}
		var readyAt *time.Time
		if i%4 == 0 {
			ready, status, code = "true", "Ready", 113
			at := beat.Add(time.Second)
			readyAt = &at
			readyCond = instance.Condition{Type: instance.CondReady, Status: instance.CondTrue, Reason: instance.ReasonGuestDeclaredReady, LastTransitionTime: at}
		}
		list[i] = &instance.Instance{
			Name: name, UUID: uuid, Backend: "fleet", Status: status, StatusCode: code,
			Config:  map[string]string{"volatile.last_state.ready": ready, "volatile.uuid": uuid},
			Devices: map[string]map[string]string{},
			Boot:    1, CreatedAt: created, StartedAt: &started, ReadyAt: readyAt, Link: "hybrid",
			Agent:        instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &beat, Since: &since},
			DevlxdSocket: dir + "/rootfs/dev/lxd/sock",
			Details: map[string]string{"boot": "1", "devlxd_socket": dir + "/rootfs/dev/lxd/sock", "guest_dir": dir,
				"layout": "current", "ring_size": "16"},
			Conditions: []instance.Condition{
				{Type: instance.CondAgentConnected, Status: instance.CondTrue, Reason: instance.ReasonAgentConnected,
					Message: "the daemon holds a link to the agent", LastTransitionTime: since},
				readyCond,
				{Type: instance.CondDegraded, Status: instance.CondFalse, Reason: instance.ReasonNotDegraded, LastTransitionTime: created},
			},
			Location: instance.LocationNone,
		}
	}
	return list
}
