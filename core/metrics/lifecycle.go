package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/guestlink/guestlink/core/events"
)

// UnknownBackend is the backend label of an event whose instance is gone
// before the subscriber could look it up.
const UnknownBackend = "unknown"

// boot is what the subscriber knows of one instance's current boot.
type boot struct {
	backend string
	start   time.Time
	// Whether the boot's first agent STARTED, CONNECTED and Ready were
	// observed (or need not be: a restored Ready).
	agentStarted, agentConnected, ready bool
}

// lifecycle turns lifecycle events into timings and counters. It runs on
// one goroutine: boots needs no lock. It holds one entry per instance
// that runs, dropped when the instance stops, fails or is deleted.
type lifecycle struct {
	m     *Metrics
	boots map[string]*boot // by instance name
	last  int64            // id of the last event handled, to resume after an overflow
}

func newLifecycle(m *Metrics) *lifecycle {
	return &lifecycle{m: m, boots: make(map[string]*boot)}
}

// run handles sub's events until ctx ends or the bus closes. A
// subscription the bus ended because this subscriber fell behind is
// resumed after the last event handled: nothing is missed.
func (l *lifecycle) run(ctx context.Context, sub *events.Subscription) {
	for {
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				_ = sub.Close()
			case <-done:
			}
		}()
		for ev := range sub.C() {
			l.handle(ev)
		}
		close(done)
		err := sub.Err()
		if ctx.Err() != nil || !errors.Is(err, events.ErrOverflow) {
			if err != nil && !errors.Is(err, events.ErrClosed) {
				l.m.log.Warn("metrics: lifecycle subscription ended", "err", err)
			}
			return
		}
		l.m.log.Warn("metrics: lifecycle subscriber fell behind; resuming", "after", l.last)
		next, err := l.m.cfg.Events.Subscribe(events.Filter{Types: []string{events.TypeLifecycle}, After: l.last, Buffer: l.m.cfg.EventBuffer})
		if err != nil {
			l.m.log.Warn("metrics: resubscribing to lifecycle events", "err", err)
			return
		}
		sub = next
	}
}

// handle updates the metrics for one lifecycle event.
func (l *lifecycle) handle(ev events.Event) {
	if ev.ID > l.last {
		l.last = ev.ID
	}
	lc, err := ev.Lifecycle()
	if err != nil {
		l.m.log.Warn("metrics: undecodable lifecycle event", "id", ev.ID, "err", err)
		return
	}
	name := ev.Instance
	b := l.boots[name]
	switch lc.Action {
	case events.InstanceStarted, events.InstanceRestarted:
		if lc.Requestor != nil && lc.Requestor.Protocol == "daemon" {
			// A guest a restarted daemon found running: its boot began
			// before this daemon, so its timings are unknown.
			delete(l.boots, name)
			return
		}
		l.boots[name] = l.newBoot(name, ev.Timestamp)
	case events.InstanceAgentStarted:
		if b != nil && !b.agentStarted {
			b.agentStarted = true
			l.m.startToAgentStarted.WithLabelValues(b.backend).Observe(since(b.start, ev.Timestamp))
		}
	case events.InstanceAgentConnected:
		if b != nil && !b.agentStarted {
			// Its STARTED word was overwritten in the ring before the
			// daemon read it (LXD's ring holds 16 bytes: the latest
			// word): the agent had started by now.
			b.agentStarted = true
			l.m.startToAgentStarted.WithLabelValues(b.backend).Observe(since(b.start, ev.Timestamp))
		}
		if b != nil && !b.agentConnected {
			b.agentConnected = true
			l.m.startToAgentConnected.WithLabelValues(b.backend).Observe(since(b.start, ev.Timestamp))
		}
	case events.InstanceReady:
		if b != nil && !b.ready {
			b.ready = true
			if restored, _ := lc.Context["restored"].(bool); !restored {
				l.m.startToReady.WithLabelValues(b.backend).Observe(since(b.start, ev.Timestamp))
			}
		}
	case events.InstanceUnready:
		l.m.readyFlaps.WithLabelValues(l.backendOf(name, b)).Inc()
	case events.InstanceAgentLost:
		l.m.agentLost.WithLabelValues(l.backendOf(name, b)).Inc()
	case events.InstanceError:
		l.m.instanceErrors.WithLabelValues(l.backendOf(name, b)).Inc()
		delete(l.boots, name)
	case events.InstanceStopped:
		// A guest that crashed (exit "crash": its context has an error)
		// is in Error too; one that powered itself off has none.
		if msg, _ := lc.Context["error"].(string); msg != "" {
			l.m.instanceErrors.WithLabelValues(l.backendOf(name, b)).Inc()
		}
		delete(l.boots, name)
	case events.InstanceDeleted:
		delete(l.boots, name)
	}
}

// newBoot starts the timings of a boot of name whose start event was
// published at ts: the boot starts when the backend was asked to start the
// guest (the instance's started_at) unless the instance has started again
// since, then at ts.
func (l *lifecycle) newBoot(name string, ts time.Time) *boot {
	b := &boot{backend: UnknownBackend, start: ts}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	inst, err := l.m.cfg.Instances.Get(ctx, name)
	if err != nil {
		return b
	}
	b.backend = inst.Backend
	if inst.StartedAt != nil && !inst.StartedAt.After(ts) {
		b.start = *inst.StartedAt
	}
	return b
}

// backendOf returns the backend of name: its boot's, else the instance's.
func (l *lifecycle) backendOf(name string, b *boot) string {
	if b != nil {
		return b.backend
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	inst, err := l.m.cfg.Instances.Get(ctx, name)
	if err != nil {
		return UnknownBackend
	}
	return inst.Backend
}

// since is the seconds from start to t, never negative.
func since(start, t time.Time) float64 {
	return max(t.Sub(start).Seconds(), 0)
}
