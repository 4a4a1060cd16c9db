package agentmon

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// The tests of this file run inside a synctest bubble: heartbeats come
// every simulated 5 s, and what the monitor did (steps run, states and
// heartbeats recorded, in order) is checked exactly.

// beatCall is one call of the monitor into the instance service: a state
// recorded (SetAgentState) or a heartbeat alone (RecordHeartbeat).
type beatCall struct {
	beat bool // RecordHeartbeat
	st   instance.AgentState
	at   time.Time // the bubble's time of the call
}

// beatGuest is a ringGuest whose instance service has the manager's
// heartbeat shortcut (HeartbeatRecorder), which steady monitors need, and
// logs every call in order.
type beatGuest struct {
	*ringGuest

	logMu sync.Mutex
	log   []beatCall
	state instance.AgentState // as recorded
}

func (g *beatGuest) SetAgentState(ctx context.Context, uuid string, st instance.AgentState, hb time.Time) error {
	g.logMu.Lock()
	g.log = append(g.log, beatCall{st: st, at: time.Now()})
	g.state = st
	g.logMu.Unlock()
	return g.ringGuest.SetAgentState(ctx, uuid, st, hb)
}

// RecordHeartbeat takes a heartbeat of the recorded state only, as the
// manager does.
func (g *beatGuest) RecordHeartbeat(_ string, st instance.AgentState, _ time.Time) bool {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if st != g.state {
		return false
	}
	g.log = append(g.log, beatCall{beat: true, st: st, at: time.Now()})
	return true
}

func (g *beatGuest) calls() []beatCall {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	return slices.Clone(g.log)
}

// startBeatGuest starts the monitor of one guest whose backend pushes its
// ring (sdk.CapRingPush) with default periods (heartbeat 5 s, lost after
// 3, ConnectedPoll 5 s), in a synctest bubble, and brings it to steady: the
// agent accepted the advertisement (set here: the test's links have no
// agent) and a pushed CONNECTED (seq 1) confirmed it.
func startBeatGuest(t *testing.T) (*Service, *beatGuest, *monitor) {
	t.Helper()
	svc, g, m := newBeatGuest(t)
	g.push(svc, "CONNECTED\n", 1)
	synctest.Wait()
	if !m.steady.Load() {
		t.Fatal("a confirmed connected agent whose backend pushes is not steady")
	}
	return svc, g, m
}

// newBeatGuest starts the monitor of a beatGuest with a 16-byte ring (as
// QEMU's) and marks the advertisement accepted, as if the agent had (the
// test's links have no agent: the PUT failed).
func newBeatGuest(t *testing.T) (*Service, *beatGuest, *monitor) {
	t.Helper()
	ring, err := ringbuffer.New(16)
	if err != nil {
		t.Fatal(err)
	}
	rg := &ringGuest{ring: ring, inst: &instance.Instance{Name: "vm1", UUID: "uuid-vm1", Backend: "fleet", Config: map[string]string{}}}
	g := &beatGuest{ringGuest: rg}
	svc, err := New(Config{Instances: g, Links: deadLinks{}, Certs: testCerts(t), Throttles: rg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	svc.GuestRunning(rg.inst, nil)
	synctest.Wait() // the advertisement failed: nothing runs
	m := svc.monitor(rg.inst.UUID)
	m.tr.advertOK = true
	return svc, g, m
}

// push is the backend pushing ring bytes with sequence number seq.
func (g *beatGuest) push(svc *Service, data string, seq uint64) {
	svc.BackendEvent(g.inst, contract.Event{UUID: g.inst.UUID, Kind: contract.EventRingData, Ring: []byte(data), RingSeq: seq})
}

// TestSteadyHeartbeats checks that a heartbeat that changes nothing
// (CONNECTED pushed to a steady monitor) runs no step and is recorded as a
// heartbeat at its time, and that whatever may change the state after
// heartbeats still goes through a step and applies in order after them.
// Tried after five absorbed heartbeats: STOPPED, STARTED, two words in
// one push ending with STOPPED, a partial line, a push of
// no bytes (absorbed, nothing recorded) and a heartbeat older than the
// last push (dropped, nothing recorded).
func TestSteadyHeartbeats(t *testing.T) {
	tests := []struct {
		name string
		push string
		seq  uint64 // 0: the next one
		want []instance.AgentState
		step bool // a step must run
	}{
		{"stopped", "STOPPED\n", 0, []instance.AgentState{instance.AgentConnected, instance.AgentStopped}, true},
		{"started", "STARTED\n", 0, []instance.AgentState{instance.AgentConnected, instance.AgentStarted}, true},
		{"two words", "CONNECTED\nSTOPPED\n", 0, []instance.AgentState{instance.AgentConnected, instance.AgentStopped}, true},
		{"partial line", "STOP", 0, []instance.AgentState{instance.AgentConnected}, true},
		{"empty", "", 0, []instance.AgentState{instance.AgentConnected}, false},
		{"stale heartbeat", "CONNECTED\n", 3, []instance.AgentState{instance.AgentConnected}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc, g, m := startBeatGuest(t)
				steps := m.stepsRun.Load()
				seq := uint64(1)
				var beats []time.Time
				for range 5 {
					time.Sleep(5 * time.Second)
					seq++
					g.push(svc, "CONNECTED\n", seq)
					beats = append(beats, time.Now())
				}
				synctest.Wait()
				if got := m.stepsRun.Load(); got != steps {
					t.Fatalf("5 heartbeats ran %d steps, want none", got-steps)
				}
				calls := g.calls()
				var got []time.Time
				for _, c := range calls[1:] { // calls[0]: CONNECTED recorded
					if !c.beat || c.st != instance.AgentConnected {
						t.Fatalf("call %+v after the first CONNECTED, want heartbeats only", c)
					}
					got = append(got, c.at)
				}
				if !slices.Equal(got, beats) {
					t.Fatalf("heartbeats recorded at %v, want %v", got, beats)
				}
				if last := m.beat.load(); !last.Equal(beats[4]) {
					t.Errorf("last heartbeat %v, want %v", last, beats[4])
				}

				next := tt.seq
				if next == 0 {
					next = seq + 1
				}
				g.push(svc, tt.push, next)
				synctest.Wait()
				if ran := m.stepsRun.Load() != steps; ran != tt.step {
					t.Errorf("push %q: a step ran %v, want %v", tt.push, ran, tt.step)
				}
				_, changes, _, _ := g.counts()
				if !slices.Equal(changes, tt.want) {
					t.Errorf("push %q: states %v, want %v", tt.push, changes, tt.want)
				}
				// A new state is recorded once, after every heartbeat.
				after := g.calls()[len(calls):]
				if n := len(tt.want); n > 1 && (len(after) != 1 || after[0].beat || after[0].st != tt.want[n-1]) {
					t.Errorf("push %q: calls after the heartbeats %+v, want %s recorded once", tt.push, after, tt.want[n-1])
				} else if n == 1 && len(after) > 0 {
					t.Errorf("push %q: calls after the heartbeats %+v, want none", tt.push, after)
				}
			})
		})
	}
}

// TestSteadyAgentLost checks that a steady guest whose heartbeats stop is
// declared lost by the sweep, between 3 and 4 heartbeat periods after its
// last one (as a timer per monitor did), and that a monitor whose
// advertisement changed takes no heartbeat without a step until the agent
// confirmed it again.
func TestSteadyAgentLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, g, m := startBeatGuest(t)
		for seq := uint64(2); seq <= 4; seq++ {
			time.Sleep(5 * time.Second)
			g.push(svc, "CONNECTED\n", seq)
		}
		last := time.Now()
		time.Sleep(15*time.Second - time.Nanosecond)
		synctest.Wait()
		if _, _, st, _ := g.counts(); st != instance.AgentConnected {
			t.Fatalf("agent %s 1 ns before 3 missed heartbeats, want connected", st)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		calls := g.calls()
		lost := calls[len(calls)-1]
		if lost.beat || lost.st != instance.AgentLost {
			t.Fatalf("last call %+v 20 s after the last heartbeat, want agent lost", lost)
		}
		if d := lost.at.Sub(last); d < 15*time.Second || d > 20*time.Second {
			t.Errorf("agent lost %v after its last heartbeat, want 15 s to 20 s", d)
		}
		if m.steady.Load() {
			t.Error("a lost agent's monitor is still steady")
		}

		// Heard again and confirmed: steady again; a new advertisement
		// (the devlxd flag changed) ends it until the agent confirms.
		g.push(svc, "CONNECTED\n", 5)
		synctest.Wait()
		m.tr.advertOK = true // the failed PUT that followed CONNECTED reset it
		g.push(svc, "CONNECTED\n", 6)
		synctest.Wait()
		if !m.steady.Load() {
			t.Fatal("a confirmed agent heard again is not steady")
		}
		m.requestAdvert(true)
		if m.steady.Load() {
			t.Error("a monitor whose advertisement changed is still steady")
		}
		synctest.Wait()
		steps := m.stepsRun.Load()
		g.push(svc, "CONNECTED\n", 7)
		synctest.Wait()
		if m.stepsRun.Load() == steps {
			t.Error("a heartbeat after a new advertisement ran no step")
		}
	})
}

// TestUnpushedRingNotSteady checks a backend that does not push (a plugin
// without sdk.CapRingPush, or one built before it): its monitor reads the
// ring on its own timer as before, never goes steady, and its agent is
// still declared lost after 3 missed heartbeats.
func TestUnpushedRingNotSteady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, g, m := newBeatGuest(t)
		rg := g.ringGuest
		for range 3 {
			rg.write(svc, []byte("CONNECTED\n"))
			synctest.Wait()
			time.Sleep(5 * time.Second)
		}
		if m.steady.Load() || !m.tr.confirmed {
			t.Fatalf("the monitor of a backend that does not push: steady %v, confirmed %v; want only confirmed", m.steady.Load(), m.tr.confirmed)
		}
		reads, _, st, _ := rg.counts()
		if st != instance.AgentConnected || reads == 0 {
			t.Fatalf("agent %s after %d ring reads, want connected", st, reads)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if _, _, st, _ := rg.counts(); st != instance.AgentLost {
			t.Errorf("agent %s 25 s after its last heartbeat, want lost", st)
		}
	})
}
