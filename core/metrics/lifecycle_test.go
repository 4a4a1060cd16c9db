package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/testwait"
)

// histogramOf returns the count and sum of a histogram vector's series.
func histogramOf(t *testing.T, e *env, name, backend string) (uint64, float64) {
	t.Helper()
	mfs, err := e.m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "backend") == backend {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// step is one lifecycle event of a scenario, at epoch+at.
type step struct {
	action, name string
	at           time.Duration
	ctx          map[string]any
	protocol     string
}

// TestLifecycleTimings feeds lifecycle events through a real bus and checks
// the timings and counters they make. Each scenario ends with an event that
// counts (an agent lost on instance "last"): once that is seen, every
// earlier event was handled.
func TestLifecycleTimings(t *testing.T) {
	type sample struct {
		count uint64
		sum   float64
	}
	tests := []struct {
		name    string
		steps   []step
		started time.Duration // the instance's started_at, before its start event
		// samples of start → agent started, connected, Ready (backend sim)
		agentStarted, agentConnected, ready sample
		flaps, lost, errs                   float64 // backend sim
	}{
		{
			name: "a boot, Ready declared twice",
			steps: []step{
				{events.InstanceStarted, "web1", 2 * time.Second, nil, "unix"},
				{events.InstanceAgentStarted, "web1", 5 * time.Second, nil, "backend"},
				{events.InstanceAgentConnected, "web1", 6 * time.Second, nil, "agent"},
				{events.InstanceReady, "web1", 9 * time.Second, nil, "devlxd"},
				{events.InstanceReady, "web1", 12 * time.Second, nil, "devlxd"},
			},
			started:        time.Second, // the backend was asked a second before the event
			agentStarted:   sample{1, 4},
			agentConnected: sample{1, 5},
			ready:          sample{1, 8},
		},
		{
			name: "a guest found running by a restarted daemon has no timings",
			steps: []step{
				{events.InstanceStarted, "web1", 100 * time.Second, nil, "daemon"},
				{events.InstanceAgentConnected, "web1", 101 * time.Second, nil, "agent"},
				{events.InstanceReady, "web1", 102 * time.Second, nil, "devlxd"},
			},
		},
		{
			name: "a restored Ready is no boot time; a flap and an error count; CONNECTED without STARTED times both",
			steps: []step{
				{events.InstanceStarted, "web1", time.Second, nil, "unix"},
				{events.InstanceReady, "web1", time.Second, map[string]any{"restored": true}, "unix"},
				{events.InstanceAgentConnected, "web1", 3 * time.Second, nil, "agent"},
				{events.InstanceUnready, "web1", 4 * time.Second, nil, "devlxd"},
				{events.InstanceReady, "web1", 5 * time.Second, nil, "devlxd"},
				{events.InstanceError, "web1", 6 * time.Second, nil, "backend"},
			},
			started:        time.Second,
			agentStarted:   sample{1, 2}, // STARTED overwritten in the ring: started by CONNECTED
			agentConnected: sample{1, 2},
			flaps:          1,
			errs:           1,
		},
		{
			name: "a guest that died is an error; a clean exit is not",
			steps: []step{
				{events.InstanceStarted, "web1", 0, nil, "unix"},
				{events.InstanceStopped, "web1", time.Second, map[string]any{"error": "QEMU exited: signal: killed"}, "backend"},
				{events.InstanceStarted, "web1", 2 * time.Second, nil, "unix"},
				{events.InstanceStopped, "web1", 3 * time.Second, map[string]any{}, "backend"},
			},
			errs: 1,
		},
		{
			name: "a restart times the new boot; a stop forgets it",
			steps: []step{
				{events.InstanceStarted, "web1", 0, nil, "unix"},
				{events.InstanceAgentStarted, "web1", time.Second, nil, "backend"},
				{events.InstanceRestarted, "web1", 10 * time.Second, nil, "unix"},
				{events.InstanceAgentStarted, "web1", 13 * time.Second, nil, "backend"},
				{events.InstanceStopped, "web1", 20 * time.Second, nil, "unix"},
				{events.InstanceAgentConnected, "web1", 21 * time.Second, nil, "agent"},
				{events.InstanceAgentLost, "web1", 22 * time.Second, nil, "daemon"},
			},
			started:      10 * time.Second,
			agentStarted: sample{2, 1 + 3},
			lost:         1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, epoch)
			e.insts.set(running("web1", "sim", tt.started, "Running", 103, ""),
				running("last", "qemu", 0, "Running", 103, ""))
			if err := e.m.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.m.Close)
			for _, s := range tt.steps {
				e.publish(t, s.action, s.name, s.at, s.ctx, s.protocol)
			}
			e.publish(t, events.InstanceAgentLost, "last", time.Hour, nil, "daemon")
			testwait.For(t, "the scenario's last event", 30*time.Second, func() bool {
				return testutil.ToFloat64(e.m.agentLost.WithLabelValues("qemu")) == 1
			})
			for _, h := range []struct {
				info Info
				want sample
			}{{StartToAgentStarted, tt.agentStarted}, {StartToAgentConnected, tt.agentConnected}, {StartToReady, tt.ready}} {
				n, sum := histogramOf(t, e, h.info.Name, "sim")
				if n != h.want.count || sum != h.want.sum {
					t.Errorf("%s{backend=sim}: %d samples summing %gs, want %d summing %gs", h.info.Name, n, sum, h.want.count, h.want.sum)
				}
			}
			for _, c := range []struct {
				info Info
				got  float64
				want float64
			}{
				{ReadyFlaps, testutil.ToFloat64(e.m.readyFlaps.WithLabelValues("sim")), tt.flaps},
				{AgentLost, testutil.ToFloat64(e.m.agentLost.WithLabelValues("sim")), tt.lost},
				{InstanceErrors, testutil.ToFloat64(e.m.instanceErrors.WithLabelValues("sim")), tt.errs},
			} {
				if c.got != c.want {
					t.Errorf("%s{backend=sim} = %g, want %g", c.info.Name, c.got, c.want)
				}
			}
		})
	}
}

// TestLifecycleUnknownBackend checks that a counter of an instance already
// gone when its event is handled counts under backend "unknown".
func TestLifecycleUnknownBackend(t *testing.T) {
	e := newEnv(t, nil, epoch)
	if err := e.m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.m.Close)
	e.publish(t, events.InstanceAgentLost, "gone", 0, nil, "daemon")
	testwait.For(t, "the agent-lost event", 30*time.Second, func() bool {
		return testutil.ToFloat64(e.m.agentLost.WithLabelValues(UnknownBackend)) == 1
	})
}

// TestLifecycleResumesAfterOverflow checks that a subscriber the bus
// dropped for falling behind resumes after the last event it handled and
// misses none: held up in its first instance lookup, with a one-event
// buffer, it overflows for sure.
func TestLifecycleResumesAfterOverflow(t *testing.T) {
	e := newEnvBuffer(t, nil, epoch, 1)
	const n = 50
	gate := e.gatedBurst(t, n)
	testwait.For(t, "the subscriber's overflow", 30*time.Second, func() bool { return e.bus.Stats().Overflows == 1 })
	close(gate)
	testwait.For(t, "every flap counted", 30*time.Second, func() bool {
		return testutil.ToFloat64(e.m.readyFlaps.WithLabelValues("sim")) == n
	})
}

// TestLifecycleHoldsAStorm checks that the subscriber's own buffer
// (DefaultEventBuffer) holds a burst larger than the bus's default, which
// used to end it in a storm and cost a replay from the store.
func TestLifecycleHoldsAStorm(t *testing.T) {
	e := newEnv(t, nil, epoch) // the bus's default buffer (1,024)
	const n = 2000
	gate := e.gatedBurst(t, n)
	close(gate)
	testwait.For(t, "every flap counted", 30*time.Second, func() bool {
		return testutil.ToFloat64(e.m.readyFlaps.WithLabelValues("sim")) == n
	})
	if o := e.bus.Stats().Overflows; o != 0 {
		t.Fatalf("%d overflows for a burst of %d, want 0", o, n)
	}
}

// gatedBurst starts the subscriber held up in its first instance lookup
// (until the returned gate is closed) and publishes n Ready flaps of web1.
func (e *env) gatedBurst(t *testing.T, n int) chan struct{} {
	t.Helper()
	e.insts.set(running("web1", "sim", 0, "Running", 103, ""))
	gate := make(chan struct{})
	e.insts.gate = gate
	if err := e.m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.m.Close)
	for i := range n {
		e.publish(t, events.InstanceUnready, "web1", time.Duration(i), nil, "devlxd")
	}
	return gate
}
