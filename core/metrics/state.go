package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/status"
)

// scrapeTimeout bounds the instance listing of one scrape.
const scrapeTimeout = 10 * time.Second

// instanceStatuses are the statuses guestlink_instances always reports,
// zero included, for every backend (an alert on a status must see 0, not
// nothing). Others (such as a Degraded status, when the instance service
// has one) are reported when an instance has them.
var instanceStatuses = []string{
	status.Ready.String(), status.Running.String(), status.Starting.String(),
	status.Stopping.String(), status.Stopped.String(), status.Error.String(),
}

// agentStates are the label values of guestlink_instance_agents, in order;
// "none" is a running guest whose agent was not seen this boot.
var agentStates = []string{"none", string(instance.AgentStarted), string(instance.AgentConnected),
	string(instance.AgentStopped), string(instance.AgentLost)}

// stateCollector reads the instance manager, the plugin host and the event
// bus at scrape time: its gauges can never drift from what they count.
type stateCollector struct {
	cfg Config

	instances, agents, notReady, subscribers, subscribersDropped,
	streams, streamsDropped, pluginUp, pluginRestarts, buildInfo,
	kept, keptBudget, keptClosed *prometheus.Desc
}

func newStateCollector(cfg Config) *stateCollector {
	d := func(i Info) *prometheus.Desc { return prometheus.NewDesc(i.Name, i.Help, i.Labels, nil) }
	return &stateCollector{
		cfg:                cfg,
		instances:          d(Instances),
		agents:             d(InstanceAgents),
		notReady:           d(NotReadyMaxAge),
		subscribers:        d(EventSubscribers),
		subscribersDropped: d(EventSubscribersDropped),
		streams:            d(DashboardStreams),
		streamsDropped:     d(DashboardStreamsDropped),
		pluginUp:           d(PluginUp),
		pluginRestarts:     d(PluginRestarts),
		buildInfo:          d(BuildInfo),
		kept:               d(DevlxdKeptConnections),
		keptBudget:         d(DevlxdKeptConnectionsBudget),
		keptClosed:         d(DevlxdKeptConnectionsClosed),
	}
}

// Describe sends the descriptors of the collector's metrics.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.instances, c.agents, c.notReady, c.subscribers,
		c.subscribersDropped, c.streams, c.streamsDropped, c.pluginUp, c.pluginRestarts, c.buildInfo,
		c.kept, c.keptBudget, c.keptClosed} {
		ch <- d
	}
}

// backendCounts is what one scrape counts of one backend's instances.
type backendCounts struct {
	statuses map[string]int
	agents   map[string]int
	notReady time.Duration // the longest running-not-Ready age
}

// Collect reads the services and sends the metrics.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, c.cfg.Version)

	st := c.cfg.Events.Stats()
	ch <- prometheus.MustNewConstMetric(c.subscribers, prometheus.GaugeValue, float64(st.Subscribers))
	ch <- prometheus.MustNewConstMetric(c.subscribersDropped, prometheus.CounterValue, float64(st.Overflows))
	open, dropped := c.cfg.Streams()
	ch <- prometheus.MustNewConstMetric(c.streams, prometheus.GaugeValue, float64(open))
	ch <- prometheus.MustNewConstMetric(c.streamsDropped, prometheus.CounterValue, float64(dropped))
	idle, budget, closed := c.cfg.KeptConnections()
	ch <- prometheus.MustNewConstMetric(c.kept, prometheus.GaugeValue, float64(idle))
	ch <- prometheus.MustNewConstMetric(c.keptBudget, prometheus.GaugeValue, float64(budget))
	ch <- prometheus.MustNewConstMetric(c.keptClosed, prometheus.CounterValue, float64(closed))

	byBackend := map[string]*backendCounts{}
	get := func(b string) *backendCounts {
		bc := byBackend[b]
		if bc == nil {
			bc = &backendCounts{statuses: map[string]int{}, agents: map[string]int{}}
			byBackend[b] = bc
		}
		return bc
	}
	for _, p := range c.cfg.Plugins.Plugins() {
		up := 0.0
		if p.Healthy {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.pluginUp, prometheus.GaugeValue, up, p.Name)
		ch <- prometheus.MustNewConstMetric(c.pluginRestarts, prometheus.CounterValue, float64(p.Restarts), p.Name)
		get(p.Name)
	}

	now := c.cfg.Now()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	err := c.cfg.Instances.ListFunc(ctx, instance.ListFilter{}, func(i *instance.Instance) error {
		bc := get(i.Backend)
		bc.statuses[i.Status]++
		code := status.Code(i.StatusCode)
		if code != status.Running && code != status.Ready {
			return nil
		}
		agent := string(i.Agent.State)
		if agent == "" {
			agent = "none"
		}
		bc.agents[agent]++
		if code == status.Running && i.StartedAt != nil {
			bc.notReady = max(bc.notReady, now.Sub(*i.StartedAt))
		}
		return nil
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.instances, err)
		return
	}
	for backend, bc := range byBackend {
		for _, s := range instanceStatuses {
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(bc.statuses[s]), backend, s)
			delete(bc.statuses, s)
		}
		for s, n := range bc.statuses { // statuses beyond the usual ones
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(n), backend, s)
		}
		for _, a := range agentStates {
			ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(bc.agents[a]), backend, a)
		}
		ch <- prometheus.MustNewConstMetric(c.notReady, prometheus.GaugeValue, max(bc.notReady.Seconds(), 0), backend)
	}
}

var _ prometheus.Collector = (*stateCollector)(nil)
