package web

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/web/components"
)

// Fleet readiness on the overview: how long recent boots took to get their
// agent connected and to become Ready, per backend, from the event log.
const (
	// FleetEvents is how many recent lifecycle events the overview reads
	// (about a thousand boots).
	FleetEvents = 5000
	// FleetMinSamples is how many Ready boots a backend needs before its
	// p95 is taken as "usual".
	FleetMinSamples = 5
	// fleetSlowest is how many of the slowest boots are listed.
	fleetSlowest = 5
)

// bootSample is one boot seen in the event log: when it started and how
// long it took to the agent's first connection and to the first Ready.
type bootSample struct {
	name         string
	start        time.Time
	agent, ready time.Duration // 0: did not happen (yet)
}

// bootSamples pairs the lifecycle events of each instance into boots: a
// start (or restart) opens one, the first agent-connected and the first
// ready after it are its times, a stop, an error or a delete closes it.
func bootSamples(evs []events.Event) []bootSample {
	open := map[string]*bootSample{}
	var out []*bootSample
	for _, ev := range evs {
		lc, err := events.DecodeLifecycle(ev.Metadata)
		if err != nil {
			continue
		}
		name := ev.Instance
		if name == "" {
			name = strings.TrimPrefix(lc.Source, "/1.0/instances/")
		}
		b := open[name]
		switch lc.Action {
		case events.InstanceStarted, events.InstanceRestarted:
			nb := &bootSample{name: name, start: ev.Timestamp}
			open[name] = nb
			out = append(out, nb)
		case events.InstanceAgentConnected:
			if b != nil && b.agent == 0 {
				b.agent = max(ev.Timestamp.Sub(b.start), time.Nanosecond)
			}
		case events.InstanceReady:
			if b != nil && b.ready == 0 {
				b.ready = max(ev.Timestamp.Sub(b.start), time.Nanosecond)
			}
		case events.InstanceStopped, events.InstanceError, events.InstanceDeleted:
			delete(open, name)
		}
	}
	res := make([]bootSample, len(out))
	for i, b := range out {
		res[i] = *b
	}
	return res
}

// percentile returns the p-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// fleetReadiness builds the overview's readiness section from the recent
// events and the current instances: per backend the distributions of time
// to agent and to Ready, their usual time (p95 of the recent Ready boots),
// the slowest boots, and the instances running without Ready for longer
// than usual.
func (d *Dashboard) fleetReadiness(ctx context.Context, all []*instance.Instance, now time.Time) components.Fleet {
	samples, err := d.fleet.samples(ctx, d)
	if err != nil {
		return components.Fleet{Err: "recent events unavailable: " + d.errorText("readiness charts", err)}
	}
	backendOf := map[string]string{}
	for _, inst := range all {
		backendOf[inst.Name] = inst.Backend
	}
	type acc struct{ agent, ready []time.Duration }
	per := map[string]*acc{}
	var f components.Fleet
	var slow []components.SlowBoot
	for _, s := range samples {
		b, ok := backendOf[s.name]
		if !ok {
			continue // deleted since: its backend is not known any more
		}
		a := per[b]
		if a == nil {
			a = &acc{}
			per[b] = a
		}
		if s.agent > 0 {
			a.agent = append(a.agent, s.agent)
		}
		if s.ready > 0 {
			a.ready = append(a.ready, s.ready)
			slow = append(slow, components.SlowBoot{Name: s.name, Backend: b, Started: s.start, TimeToReady: s.ready})
		}
	}
	usual := map[string]time.Duration{}
	for _, b := range slices.Sorted(maps.Keys(per)) {
		a := per[b]
		slices.Sort(a.agent)
		slices.Sort(a.ready)
		bf := components.BackendFleet{Backend: b, Agent: a.agent, Ready: a.ready}
		if len(a.ready) >= FleetMinSamples {
			bf.Usual = percentile(a.ready, 0.95)
			usual[b] = bf.Usual
		}
		bf.Stats = []components.FleetStat{
			{Label: "agent connected", N: len(a.agent), P50: percentile(a.agent, 0.5), P95: percentile(a.agent, 0.95), Max: percentile(a.agent, 1)},
			{Label: "Ready", N: len(a.ready), P50: percentile(a.ready, 0.5), P95: percentile(a.ready, 0.95), Max: percentile(a.ready, 1)},
		}
		f.Backends = append(f.Backends, components.BuildFleetChart(bf))
	}
	sort.SliceStable(slow, func(i, j int) bool { return slow[i].TimeToReady > slow[j].TimeToReady })
	f.Slowest = slow[:min(len(slow), fleetSlowest)]
	for _, inst := range all {
		if inst.Status != "Running" || inst.StartedAt == nil {
			continue
		}
		u, ok := usual[inst.Backend]
		if up := now.Sub(*inst.StartedAt); ok && up > u {
			f.Overdue = append(f.Overdue, components.Overdue{Name: inst.Name, Backend: inst.Backend, Running: up, Usual: u})
		}
	}
	sort.SliceStable(f.Overdue, func(i, j int) bool { return f.Overdue[i].Running > f.Overdue[j].Running })
	return f
}

// fleetCache keeps the boots paired from the event log as of the newest
// event id: overviews loaded while nothing happens read the log once.
type fleetCache struct {
	mu   sync.Mutex
	id   int64
	boot []bootSample
}

// samples returns the boots of the last FleetEvents lifecycle events.
func (fc *fleetCache) samples(ctx context.Context, d *Dashboard) ([]bootSample, error) {
	id, err := d.cfg.Events.LastID(ctx)
	if err != nil {
		return nil, err
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.boot != nil && fc.id == id {
		return fc.boot, nil
	}
	evs, err := d.cfg.Events.Recent(ctx, events.TypeLifecycle, FleetEvents)
	if err != nil {
		return nil, err
	}
	fc.id, fc.boot = id, bootSamples(evs)
	if fc.boot == nil {
		fc.boot = []bootSample{}
	}
	return fc.boot, nil
}
