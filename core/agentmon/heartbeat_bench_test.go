package agentmon

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// hbBackend is a batch-reading backend whose every ring holds one
// heartbeat word.
type hbBackend struct{ contract.Backend }

var hbWord = []byte("CONNECTED\n")

func (hbBackend) ReadRing(context.Context, contract.Handle, int) ([]byte, error) { return hbWord, nil }

func (hbBackend) ReadRings(_ context.Context, reads []contract.RingRead) ([]contract.RingData, error) {
	out := make([]contract.RingData, len(reads))
	for i := range out {
		out[i].Data = hbWord
	}
	return out, nil
}

// hbInstances records nothing but the count of states, as the manager's
// heartbeat shortcut stores only the time.
type hbInstances struct {
	Instances
	be    contract.Backend
	calls atomic.Int64
}

func (f *hbInstances) SetAgentState(context.Context, string, instance.AgentState, time.Time) error {
	f.calls.Add(1)
	return nil
}

// RecordHeartbeat is the manager's shortcut (HeartbeatRecorder).
func (f *hbInstances) RecordHeartbeat(string, instance.AgentState, time.Time) bool {
	f.calls.Add(1)
	return true
}

func (f *hbInstances) Runtime(context.Context, string) (contract.Backend, contract.Handle, error) {
	return f.be, contract.Handle("h"), nil
}

// BenchmarkHeartbeat is the daemon's work for one heartbeat of a connected
// agent whose state does not change: the read through the ring batcher, the
// parse and the report. allocs/op is the figure to watch (issue 14: 2,000
// heartbeats a second at 10,000 guests).
func BenchmarkHeartbeat(b *testing.B) {
	insts := &hbInstances{be: hbBackend{}}
	// The ring budget is sized for a read every few seconds per guest;
	// the benchmark reads far faster, so it gets an unlimited one.
	s, err := New(Config{Instances: insts, Links: deadLinks{}, Certs: testCerts(b),
		RingBytesPerSecond: 1e12, RingBurstBytes: 1 << 30, RingLinesPerSecond: 1e12, RingBurstLines: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	// Many guests at once, as in a fleet: their reads share batch calls.
	b.SetParallelism(128)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		m := &monitor{svc: s, uuid: "u", name: "n", backend: "b", ring: newRingBudget(&s.cfg), ctx: context.Background()}
		m.tr.state = instance.AgentConnected
		m.tr.advertOK, m.tr.confirmed = true, true
		for pb.Next() {
			if !m.readRing() {
				b.Error("nothing read")
				return
			}
		}
	})
	// ns/op is the batcher's gathering time shared out; the CPU spent
	// per heartbeat is the cost.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if insts.calls.Load() == 0 {
		b.Fatal("no state reported")
	}
}

// processCPU is the CPU time (user and system) of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSteadyHeartbeat is the daemon's work in agentmon for one pushed
// heartbeat of a steady monitor (a connected, confirmed agent whose
// backend pushes its ring, issue 28): Service.BackendEvent takes it in
// without a step, records the heartbeat and wakes nothing. cpu-ns/op is
// the process's CPU per heartbeat.
func BenchmarkSteadyHeartbeat(b *testing.B) {
	insts := &hbInstances{be: hbBackend{}}
	certs := testCerts(b)
	s, err := New(Config{Instances: insts, Links: deadLinks{}, Certs: certs})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, err := certs.Instance("vm1")
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		inst := &instance.Instance{Name: "vm1", UUID: fmt.Sprint("uuid-", next.Add(1)), Backend: "fleet"}
		m := newMonitor(s, inst, c)
		m.tr.state, m.tr.advertOK, m.tr.confirmed = instance.AgentConnected, true, true
		m.pushed.seen, m.steadyWord = true, ringproto.Connected
		s.mu.Lock()
		s.monitors[inst.UUID] = m
		s.mu.Unlock()
		ev := contract.Event{UUID: inst.UUID, Kind: contract.EventRingData, Ring: hbWord}
		for pb.Next() {
			ev.RingSeq++
			s.BackendEvent(inst, ev)
		}
		if m.stepsRun.Load() != 0 {
			b.Error("a steady heartbeat ran a step")
		}
	})
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if insts.calls.Load() == 0 {
		b.Fatal("no heartbeat recorded")
	}
}
