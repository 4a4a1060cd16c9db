package daemon

import (
	"context"
	"sync/atomic"

	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/metrics"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/transport/devlxd"
	"github.com/guestlink/guestlink/web"
)

// pluginList lists d's plugins as the metrics read them: the metrics are
// built before the plugin host, which is set before anything can scrape.
type pluginList struct{ d *Daemon }

func (p pluginList) Plugins() []metrics.Plugin {
	if p.d.plugins == nil {
		return nil
	}
	list := p.d.plugins.List()
	out := make([]metrics.Plugin, len(list))
	for i, st := range list {
		out[i] = metrics.Plugin{Name: st.Name, Healthy: st.Health == pluginhost.HealthHealthy, Restarts: st.Restarts}
	}
	return out
}

// dashStats is the dashboard the metrics read, set once it serves (scrapes
// on the admin socket may come while listenTCP builds it).
type dashStats = atomic.Pointer[web.Dashboard]

// newMetrics builds the daemon's metrics over the bus, the plugin host and
// the instance manager (through late: the manager is built after the
// services that report to the metrics).
func newMetrics(d *Daemon, late *lateInstances) *metrics.Metrics {
	return metrics.New(metrics.Config{
		Instances: late,
		Events:    d.bus,
		Plugins:   pluginList{d},
		Version:   Version,
		Streams:   d.streamStats,
		KeptConnections: func() (int, int, uint64) {
			if srv := d.keptStats.Load(); srv != nil {
				st := srv.KeptConnections()
				return st.Idle, st.Budget, st.Closed
			}
			return 0, 0, 0
		},
		Logger: d.log.With("component", "metrics"),
	})
}

func (l *lateInstances) Get(ctx context.Context, name string) (*instance.Instance, error) {
	return l.m.Get(ctx, name)
}

func (l *lateInstances) ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error {
	return l.m.ListFunc(ctx, f, fn)
}

// streamStats reports the dashboard's live streams (none without a TCP
// listener, or before it serves).
func (d *Daemon) streamStats() (int, uint64) {
	dash := d.dashStats.Load()
	if dash == nil {
		return 0, 0
	}
	st := dash.StreamStats()
	return st.Open, st.Dropped
}

var (
	_ metrics.InstanceSource = (*lateInstances)(nil)
	_ metrics.PluginSource   = pluginList{}
	// Metrics is what devlxd and agentmon report to.
	_ devlxd.RequestObserver = (*metrics.Metrics)(nil)
	_ agentmon.RingObserver  = (*metrics.Metrics)(nil)
	_ linkhost.ConnObserver  = (*metrics.Metrics)(nil)
)
