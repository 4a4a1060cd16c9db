package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/guestlink/guestlink/core/instance"
)

// TestStateCollector checks the scrape-time gauges against instance,
// plugin and bus states: every usual status and agent state is reported,
// zeros included, for each backend (installed or used); unusual statuses
// appear when an instance has them; the not-Ready age is the oldest
// Running (not Ready) instance's.
func TestStateCollector(t *testing.T) {
	now := epoch.Add(time.Hour)
	plugins := fakePlugins{
		{Name: "sim", Healthy: true, Restarts: 2},
		{Name: "qemu", Healthy: false, Restarts: 5}, // restarting
	}
	e := newEnv(t, plugins, now)
	e.m = New(Config{Instances: e.insts, Events: e.bus, Plugins: plugins, Version: "test",
		Now: func() time.Time { return now }, Streams: func() (int, uint64) { return 3, 7 },
		KeptConnections: func() (int, int, uint64) { return 12, 2730, 5 }})
	e.insts.set(
		running("a", "sim", 59*time.Minute, "Ready", 113, instance.AgentConnected),
		running("b", "sim", 50*time.Minute, "Running", 103, instance.AgentStarted),
		running("c", "sim", 55*time.Minute, "Running", 103, ""),
		&instance.Instance{Name: "d", Backend: "sim", Status: "Stopped", StatusCode: 102},
		&instance.Instance{Name: "e", Backend: "sim", Status: "Frozen", StatusCode: 110},
		&instance.Instance{Name: "f", Backend: "gone", Status: "Error", StatusCode: 112},
	)
	sub, err := e.bus.Subscribe(eventsFilter())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	want := `
# HELP guestlink_instances ` + Instances.Help + `
# TYPE guestlink_instances gauge
guestlink_instances{backend="gone",status="Error"} 1
guestlink_instances{backend="gone",status="Ready"} 0
guestlink_instances{backend="gone",status="Running"} 0
guestlink_instances{backend="gone",status="Starting"} 0
guestlink_instances{backend="gone",status="Stopped"} 0
guestlink_instances{backend="gone",status="Stopping"} 0
guestlink_instances{backend="qemu",status="Error"} 0
guestlink_instances{backend="qemu",status="Ready"} 0
guestlink_instances{backend="qemu",status="Running"} 0
guestlink_instances{backend="qemu",status="Starting"} 0
guestlink_instances{backend="qemu",status="Stopped"} 0
guestlink_instances{backend="qemu",status="Stopping"} 0
guestlink_instances{backend="sim",status="Error"} 0
guestlink_instances{backend="sim",status="Frozen"} 1
guestlink_instances{backend="sim",status="Ready"} 1
guestlink_instances{backend="sim",status="Running"} 2
guestlink_instances{backend="sim",status="Starting"} 0
guestlink_instances{backend="sim",status="Stopped"} 1
guestlink_instances{backend="sim",status="Stopping"} 0
# HELP guestlink_instance_agents ` + InstanceAgents.Help + `
# TYPE guestlink_instance_agents gauge
guestlink_instance_agents{backend="gone",state="connected"} 0
guestlink_instance_agents{backend="gone",state="lost"} 0
guestlink_instance_agents{backend="gone",state="none"} 0
guestlink_instance_agents{backend="gone",state="started"} 0
guestlink_instance_agents{backend="gone",state="stopped"} 0
guestlink_instance_agents{backend="qemu",state="connected"} 0
guestlink_instance_agents{backend="qemu",state="lost"} 0
guestlink_instance_agents{backend="qemu",state="none"} 0
guestlink_instance_agents{backend="qemu",state="started"} 0
guestlink_instance_agents{backend="qemu",state="stopped"} 0
guestlink_instance_agents{backend="sim",state="connected"} 1
guestlink_instance_agents{backend="sim",state="lost"} 0
guestlink_instance_agents{backend="sim",state="none"} 1
guestlink_instance_agents{backend="sim",state="started"} 1
guestlink_instance_agents{backend="sim",state="stopped"} 0
# HELP guestlink_instance_not_ready_max_age_seconds ` + NotReadyMaxAge.Help + `
# TYPE guestlink_instance_not_ready_max_age_seconds gauge
guestlink_instance_not_ready_max_age_seconds{backend="gone"} 0
guestlink_instance_not_ready_max_age_seconds{backend="qemu"} 0
guestlink_instance_not_ready_max_age_seconds{backend="sim"} 600
# HELP guestlink_plugin_up ` + PluginUp.Help + `
# TYPE guestlink_plugin_up gauge
guestlink_plugin_up{plugin="qemu"} 0
guestlink_plugin_up{plugin="sim"} 1
# HELP guestlink_plugin_restarts_total ` + PluginRestarts.Help + `
# TYPE guestlink_plugin_restarts_total counter
guestlink_plugin_restarts_total{plugin="qemu"} 5
guestlink_plugin_restarts_total{plugin="sim"} 2
# HELP guestlink_event_subscribers ` + EventSubscribers.Help + `
# TYPE guestlink_event_subscribers gauge
guestlink_event_subscribers 1
# HELP guestlink_event_subscribers_dropped_total ` + EventSubscribersDropped.Help + `
# TYPE guestlink_event_subscribers_dropped_total counter
guestlink_event_subscribers_dropped_total 0
# HELP guestlink_dashboard_streams ` + DashboardStreams.Help + `
# TYPE guestlink_dashboard_streams gauge
guestlink_dashboard_streams 3
# HELP guestlink_dashboard_streams_dropped_total ` + DashboardStreamsDropped.Help + `
# TYPE guestlink_dashboard_streams_dropped_total counter
guestlink_dashboard_streams_dropped_total 7
# HELP guestlink_devlxd_kept_connections ` + DevlxdKeptConnections.Help + `
# TYPE guestlink_devlxd_kept_connections gauge
guestlink_devlxd_kept_connections 12
# HELP guestlink_devlxd_kept_connections_budget ` + DevlxdKeptConnectionsBudget.Help + `
# TYPE guestlink_devlxd_kept_connections_budget gauge
guestlink_devlxd_kept_connections_budget 2730
# HELP guestlink_devlxd_kept_connections_closed_total ` + DevlxdKeptConnectionsClosed.Help + `
# TYPE guestlink_devlxd_kept_connections_closed_total counter
guestlink_devlxd_kept_connections_closed_total 5
# HELP guestlink_build_info ` + BuildInfo.Help + `
# TYPE guestlink_build_info gauge
guestlink_build_info{version="test"} 1
`
	names := []string{Instances.Name, InstanceAgents.Name, NotReadyMaxAge.Name, PluginUp.Name,
		PluginRestarts.Name, EventSubscribers.Name, EventSubscribersDropped.Name, BuildInfo.Name,
		DashboardStreams.Name, DashboardStreamsDropped.Name,
		DevlxdKeptConnections.Name, DevlxdKeptConnectionsBudget.Name, DevlxdKeptConnectionsClosed.Name}
	if err := testutil.GatherAndCompare(e.m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// TestStateCollectorListError checks that a failing instance listing fails
// the instance gauges of the scrape, not the daemon, and that the handler
// serves the rest (ContinueOnError).
func TestStateCollectorListError(t *testing.T) {
	e := newEnv(t, fakePlugins{{Name: "sim", Healthy: true}}, epoch)
	e.insts.err = errors.New("store down")
	mfs, err := e.m.Registry().Gather()
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("Gather error %v, want the listing's", err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == PluginUp.Name
	}
	if !found {
		t.Fatalf("no %s despite the listing error: the other metrics must still be served", PluginUp.Name)
	}
}

// BenchmarkGather measures one scrape's collection with 10,000 instances
// over 2 backends (the instance listing itself is a fake over a slice: the
// manager's ListFunc is measured with GET /1.0/instances).
func BenchmarkGather(b *testing.B) {
	insts := &fakeInstances{}
	var list []*instance.Instance
	for i := range 10000 {
		backend := []string{"sim", "qemu"}[i%2]
		switch i % 4 {
		case 0:
			list = append(list, running(fmt.Sprint("r", i), backend, 0, "Ready", 113, instance.AgentConnected))
		case 1:
			list = append(list, running(fmt.Sprint("r", i), backend, 0, "Running", 103, instance.AgentStarted))
		default:
			list = append(list, &instance.Instance{Name: fmt.Sprint("s", i), Backend: backend, Status: "Stopped", StatusCode: 102})
		}
	}
	insts.set(list...)
	m := New(Config{Instances: insts, Events: noEvents{}, Plugins: fakePlugins{{Name: "sim"}, {Name: "qemu"}}})
	exercise(m)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Registry().Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
