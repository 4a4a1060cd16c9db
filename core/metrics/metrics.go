// Package metrics is the daemon's Prometheus instrumentation: its own
// registry (never the global one) with the Go runtime and process
// collectors, lifecycle timings and counters fed by an in-process
// subscriber of the event bus, gauges read from the instance manager and
// the plugin host at scrape time, and the observers the devlxd server and
// the agent monitor report to. Catalog lists every metric it exports.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// InstanceSource is the instance service read at scrape time and to name
// an event's backend (core/instance.Manager).
type InstanceSource interface {
	Get(ctx context.Context, name string) (*instance.Instance, error)
	ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error
}

// EventSource is the event bus (core/events.Bus): the lifecycle subscriber
// reads it, its Stats are read at scrape time.
type EventSource interface {
	Subscribe(f events.Filter) (*events.Subscription, error)
	Stats() events.Stats
}

// PluginSource lists the backend plugins and their health at scrape time.
// The composition root fills it from the plugin host
// (plugins/pluginhost.Host), which the services never import: it links the
// plugins' gRPC transport.
type PluginSource interface {
	Plugins() []Plugin
}

// Plugin is what the metrics read of one backend plugin.
type Plugin struct {
	Name     string // the plugin's name (its binary's file name)
	Healthy  bool   // its process runs, answers and has what it needs
	Restarts int    // launches after the first one
}

// Config configures Metrics.
type Config struct {
	// Instances, Events and Plugins are the services observed; all are
	// required.
	Instances InstanceSource
	Events    EventSource
	Plugins   PluginSource
	// Streams returns the dashboard's open live streams and how many were
	// dropped for falling behind (web.Dashboard.StreamStats); nil, or a
	// daemon without a dashboard, reports 0.
	Streams func() (open int, dropped uint64)
	// KeptConnections returns the guest API's idle kept-alive
	// connections, how many it keeps at most and how many it closed for
	// that budget (devlxd.Server.KeptConnections); nil reports 0.
	KeptConnections func() (idle, budget int, closed uint64)
	// Version is the daemon's version (guestlink_build_info).
	Version string
	// Logger receives the subscriber's warnings; nil discards them.
	Logger *slog.Logger
	// Now is the clock of the not-Ready ages (default time.Now).
	Now func() time.Time
	// EventBuffer is how many lifecycle events the subscriber may have
	// waiting before the bus drops it (it then resumes from the store);
	// 0 means DefaultEventBuffer.
	EventBuffer int
}

// DefaultEventBuffer is Config.EventBuffer's default: a storm of 10,000
// guests declaring Ready at once outran the bus's default (1,024), and each
// overflow cost a replay from the store while the daemon was busiest.
const DefaultEventBuffer = 16 << 10

// Metrics is the daemon's instrumentation. Create it with New, hand its
// Handler to the API and its observers to devlxd and agentmon, Start the
// event subscriber, and Close it after the bus.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry
	log *slog.Logger

	startToAgentStarted   *prometheus.HistogramVec
	startToAgentConnected *prometheus.HistogramVec
	startToReady          *prometheus.HistogramVec
	agentLost             *prometheus.CounterVec
	readyFlaps            *prometheus.CounterVec
	instanceErrors        *prometheus.CounterVec
	devlxdRequests        *prometheus.CounterVec
	devlxdDuration        *prometheus.HistogramVec
	ringBytes             *prometheus.CounterVec
	ringLines             *prometheus.CounterVec
	ringDrops             *prometheus.CounterVec
	ringDropBytes         *prometheus.CounterVec
	linkConns             *prometheus.CounterVec

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// Buckets of the lifecycle histograms: from a simulated guest's tens of
// milliseconds to a slow VM's ten minutes.
var lifecycleBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}

// Buckets of the devlxd request durations: 100 µs to about 1.6 s.
var devlxdBuckets = prometheus.ExponentialBuckets(0.0001, 4, 8)

// New returns the daemon's metrics on a registry of their own. It panics
// if a service is missing, which is a wiring bug.
func New(cfg Config) *Metrics {
	if cfg.Instances == nil || cfg.Events == nil || cfg.Plugins == nil {
		panic("metrics.New: Instances, Events and Plugins are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Streams == nil {
		cfg.Streams = func() (int, uint64) { return 0, 0 }
	}
	if cfg.KeptConnections == nil {
		cfg.KeptConnections = func() (int, int, uint64) { return 0, 0, 0 }
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	m := &Metrics{
		cfg: cfg,
		reg: prometheus.NewRegistry(),
		log: cfg.Logger,

		startToAgentStarted:   histogram(StartToAgentStarted, lifecycleBuckets),
		startToAgentConnected: histogram(StartToAgentConnected, lifecycleBuckets),
		startToReady:          histogram(StartToReady, lifecycleBuckets),
		agentLost:             counter(AgentLost),
		readyFlaps:            counter(ReadyFlaps),
		instanceErrors:        counter(InstanceErrors),
		devlxdRequests:        counter(DevlxdRequests),
		devlxdDuration:        histogram(DevlxdDuration, devlxdBuckets),
		ringBytes:             counter(RingReadBytes),
		ringLines:             counter(RingReadLines),
		ringDrops:             counter(RingReadsDropped),
		ringDropBytes:         counter(RingDroppedBytes),
		linkConns:             counter(LinkConnections),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.startToAgentStarted, m.startToAgentConnected, m.startToReady,
		m.agentLost, m.readyFlaps, m.instanceErrors,
		m.devlxdRequests, m.devlxdDuration,
		m.ringBytes, m.ringLines, m.ringDrops, m.ringDropBytes, m.linkConns,
		newStateCollector(cfg),
	)
	return m
}

func counter(i Info) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: i.Name, Help: i.Help}, i.Labels)
}

func histogram(i Info, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: i.Name, Help: i.Help, Buckets: buckets}, i.Labels)
}

// Registry returns the registry the metrics are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats (text,
// or OpenMetrics when asked). A collector that fails does not fail the
// scrape: the others are served and the error counted in
// promhttp_metric_handler_errors_total.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg,
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// Start runs the lifecycle subscriber of the event bus until Close.
func (m *Metrics) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("metrics: already started")
	}
	sub, err := m.cfg.Events.Subscribe(events.Filter{Types: []string{events.TypeLifecycle}, Buffer: m.cfg.EventBuffer})
	if err != nil {
		return fmt.Errorf("metrics: subscribing to lifecycle events: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.started, m.stop, m.done = true, cancel, make(chan struct{})
	l := newLifecycle(m)
	go func() {
		defer close(m.done)
		l.run(ctx, sub)
	}()
	return nil
}

// Close stops the lifecycle subscriber and waits for it. It is safe to
// call more than once, and without Start.
func (m *Metrics) Close() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.stop = nil
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// ObserveRequest counts one answered devlxd request (devlxd.RequestObserver;
// the daemon checks that Metrics is one: transport/devlxd's benchmarks import
// this package).
func (m *Metrics) ObserveRequest(route, method string, code int, elapsed time.Duration) {
	m.devlxdRequests.WithLabelValues(route, method, codeLabel(code)).Inc()
	m.devlxdDuration.WithLabelValues(route).Observe(elapsed.Seconds())
}

// codeLabel is the decimal status code, without allocating for the
// common ones.
func codeLabel(code int) string {
	switch code {
	case http.StatusOK:
		return "200"
	case http.StatusBadRequest:
		return "400"
	case http.StatusUnauthorized:
		return "401"
	case http.StatusForbidden:
		return "403"
	case http.StatusNotFound:
		return "404"
	case http.StatusTooManyRequests:
		return "429"
	case http.StatusInternalServerError:
		return "500"
	case http.StatusNotImplemented:
		return "501"
	}
	return strconv.Itoa(code)
}

// LinkConn counts a guest link connection, accepted or refused over the
// instance's cap (linkhost.ConnObserver).
func (m *Metrics) LinkConn(link string, admitted bool) {
	result := "accepted"
	if !admitted {
		result = "refused"
	}
	m.linkConns.WithLabelValues(link, result).Inc()
}

// RingRead counts a ring read the guest's budget admitted
// (agentmon.RingObserver).
func (m *Metrics) RingRead(backend string, n, lines int) {
	m.ringBytes.WithLabelValues(backend).Add(float64(n))
	if lines > 0 {
		m.ringLines.WithLabelValues(backend).Add(float64(lines))
	}
}

// RingDropped counts a ring read dropped over the guest's budget
// (agentmon.RingObserver).
func (m *Metrics) RingDropped(backend string, n int) {
	m.ringDrops.WithLabelValues(backend).Inc()
	m.ringDropBytes.WithLabelValues(backend).Add(float64(n))
}
