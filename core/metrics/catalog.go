package metrics

// Metric types, as the Prometheus exposition format names them.
const (
	Counter   = "counter"
	Gauge     = "gauge"
	Histogram = "histogram"
)

// Info describes one guestlink metric: its name (an interface scripts and
// alert rules rely on), type, label names and help text. docs/metrics.md
// documents the same table; a test checks that they agree.
type Info struct {
	Name   string
	Type   string
	Labels []string
	Help   string
}

// The guestlink metrics. Every label has a bounded set of values: backends
// and plugins are installed binaries, statuses and agent states are fixed
// lists, devlxd routes are route patterns. No label names an instance.
var (
	StartToAgentStarted = Info{"guestlink_instance_start_to_agent_started_seconds", Histogram, []string{"backend"},
		"Time from an instance's start to its agent's first STARTED word, per boot."}
	StartToAgentConnected = Info{"guestlink_instance_start_to_agent_connected_seconds", Histogram, []string{"backend"},
		"Time from an instance's start to its agent's first CONNECTED (link up), per boot."}
	StartToReady = Info{"guestlink_instance_start_to_ready_seconds", Histogram, []string{"backend"},
		"Time from an instance's start to its first Ready declaration, per boot."}
	AgentLost = Info{"guestlink_agent_lost_total", Counter, []string{"backend"},
		"Agents declared lost (heartbeats missed while the guest ran)."}
	ReadyFlaps = Info{"guestlink_ready_flaps_total", Counter, []string{"backend"},
		"Ready withdrawn while the instance kept running (the guest declared itself not Ready, or rebooted)."}
	InstanceErrors = Info{"guestlink_instance_errors_total", Counter, []string{"backend"},
		"Instances that went to Error (a start that failed, a guest that exited with an error, a backend that became unreachable)."}
	Instances = Info{"guestlink_instances", Gauge, []string{"backend", "status"},
		"Instances by backend and status (Ready, Running, Starting, Stopping, Stopped, Error), read at scrape time."}
	InstanceAgents = Info{"guestlink_instance_agents", Gauge, []string{"backend", "state"},
		"Running instances (Running or Ready) by backend and agent state (none, started, connected, stopped, lost), read at scrape time."}
	NotReadyMaxAge = Info{"guestlink_instance_not_ready_max_age_seconds", Gauge, []string{"backend"},
		"Longest time any instance of the backend has been running without being Ready (since its start; 0 when none), read at scrape time."}
	DevlxdRequests = Info{"guestlink_devlxd_requests_total", Counter, []string{"route", "method", "code"},
		"Guest API (devlxd) requests answered, by route pattern (\"none\": refused before routing or unknown path), method and status code."}
	DevlxdDuration = Info{"guestlink_devlxd_request_duration_seconds", Histogram, []string{"route"},
		"Time the daemon took to answer guest API (devlxd) requests, by route pattern."}
	RingReadBytes = Info{"guestlink_ring_read_bytes_total", Counter, []string{"backend"},
		"Bytes read from guests' ring buffers and parsed (within each guest's budget)."}
	RingReadLines = Info{"guestlink_ring_read_lines_total", Counter, []string{"backend"},
		"Complete lines read from guests' ring buffers and parsed."}
	RingReadsDropped = Info{"guestlink_ring_reads_dropped_total", Counter, []string{"backend"},
		"Ring reads dropped unparsed because the guest wrote over its ring budget."}
	RingDroppedBytes = Info{"guestlink_ring_dropped_bytes_total", Counter, []string{"backend"},
		"Bytes of the ring reads dropped over the guest's ring budget."}
	DevlxdKeptConnections = Info{"guestlink_devlxd_kept_connections", Gauge, nil,
		"Guest API (devlxd) connections kept alive and idle between two requests, read at scrape time."}
	DevlxdKeptConnectionsBudget = Info{"guestlink_devlxd_kept_connections_budget", Gauge, nil,
		"How many idle guest API connections the daemon keeps at most (its memory allowance, --devlxd-kept-memory); fewer when the guests' links need their descriptors."}
	DevlxdKeptConnectionsClosed = Info{"guestlink_devlxd_kept_connections_closed_total", Counter, nil,
		"Idle guest API connections the daemon closed for its budget (over the allowance, or for a link's descriptor); their guests' next requests resume TLS on new connections."}
	LinkConnections = Info{"guestlink_link_connections_total", Counter, []string{"link", "result"},
		"Guest link connections by link kind (vsock, hybrid, serial) and result: accepted, or refused because the instance holds its cap of open connections."}
	EventSubscribers = Info{"guestlink_event_subscribers", Gauge, nil,
		"Open subscriptions to the event bus (API and dashboard streams, the daemon's own)."}
	EventSubscribersDropped = Info{"guestlink_event_subscribers_dropped_total", Counter, nil,
		"Event subscriptions ended because the subscriber fell behind: its events were dropped and it must resume."}
	DashboardStreams = Info{"guestlink_dashboard_streams", Gauge, nil,
		"Open live streams of the dashboard (one per open page; they share one bus subscription)."}
	DashboardStreamsDropped = Info{"guestlink_dashboard_streams_dropped_total", Counter, nil,
		"Dashboard live streams dropped because their page fell behind; the page reconnects and resumes."}
	PluginUp = Info{"guestlink_plugin_up", Gauge, []string{"plugin"},
		"1 when the backend plugin runs and answers its health checks, 0 when it is down, restarting, rejected or unhealthy (the host lacks something it needs)."}
	PluginRestarts = Info{"guestlink_plugin_restarts_total", Counter, []string{"plugin"},
		"Launches of the backend plugin after its first one (crashes, hangs, restarts asked for)."}
	BuildInfo = Info{"guestlink_build_info", Gauge, []string{"version"},
		"Always 1; the version label is the daemon's version."}
)

// Catalog is every guestlink metric, in the order docs/metrics.md lists
// them. The Go runtime (go_*) and process (process_*) collectors'
// metrics come on top.
var Catalog = []Info{
	StartToAgentStarted, StartToAgentConnected, StartToReady,
	AgentLost, ReadyFlaps, InstanceErrors,
	Instances, InstanceAgents, NotReadyMaxAge,
	DevlxdRequests, DevlxdDuration,
	DevlxdKeptConnections, DevlxdKeptConnectionsBudget, DevlxdKeptConnectionsClosed,
	RingReadBytes, RingReadLines, RingReadsDropped, RingDroppedBytes,
	LinkConnections,
	EventSubscribers, EventSubscribersDropped,
	DashboardStreams, DashboardStreamsDropped,
	PluginUp, PluginRestarts,
	BuildInfo,
}
