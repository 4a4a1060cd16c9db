package agentmon

import (
	"slices"
	"testing"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// pushWord sends a ring-data event carrying word with sequence number seq,
// as a backend with sdk.CapRingPush does.
func (e *env) pushWord(g *guest, word string, seq uint64) {
	e.svc.BackendEvent(g.inst, sdk.Event{UUID: g.inst.UUID, Kind: sdk.EventRingData, Ring: []byte(word), RingSeq: seq})
}

// distinct is the states of calls with repeats (heartbeats) removed.
func distinct(calls []stateCall) []instance.AgentState {
	var out []instance.AgentState
	for _, c := range calls {
		if len(out) == 0 || out[len(out)-1] != c.st {
			out = append(out, c.st)
		}
	}
	return out
}

// TestPushedRingWords checks the words a backend pushes with its events
// (sdk.CapRingPush): they apply in the order of their sequence numbers, a
// push that arrives after a newer one never applies (tried: STOPPED with
// seq 2 after CONNECTED with seq 3, then STARTED with seq 4: the states
// go started, connected, started, never stopped), the ring is not read
// through ReadRing once the backend pushes, and words pushed before the
// guest's monitor existed are applied when it starts.
func TestPushedRingWords(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)

	e.pushWord(g, "STARTED\n", 1)
	e.waitState(g, instance.AgentStarted)
	reads := g.ring.readCount()

	e.pushWord(g, "CONNECTED\n", 3)
	e.waitState(g, instance.AgentConnected)
	e.pushWord(g, "STOPPED\n", 2) // older than CONNECTED: dropped
	e.pushWord(g, "STARTED\n", 4)
	e.waitState(g, instance.AgentStarted)

	want := []instance.AgentState{instance.AgentStarted, instance.AgentConnected, instance.AgentStarted}
	if got := distinct(e.insts.calls(g.inst.UUID)); !slices.Equal(got, want) {
		t.Errorf("states %v, want %v (the stale STOPPED must never apply)", got, want)
	}
	m := e.svc.monitor(g.inst.UUID)
	m.bgMu.Lock()
	stale := m.pushed.stale
	m.bgMu.Unlock()
	if stale != 1 {
		t.Errorf("%d stale pushes counted, want 1", stale)
	}
	if got := g.ring.readCount(); got != reads {
		t.Errorf("the ring was read %d times after the backend pushed", got-reads)
	}

	// A push that came before the guest's monitor (a daemon starting
	// while its guests heartbeat) is applied when the monitor starts.
	g2 := e.guest("vm2")
	e.pushWord(g2, "STARTED\n", 7)
	e.pushWord(g2, "CONNECTED\n", 8)
	e.pushWord(g2, "STOPPED\n", 6)
	e.svc.GuestRunning(g2.inst, g2.ep)
	e.waitState(g2, instance.AgentConnected)
	if got := distinct(e.insts.calls(g2.inst.UUID)); !slices.Equal(got, []instance.AgentState{instance.AgentConnected}) {
		t.Errorf("early pushes gave states %v, want only connected (the last word wins)", got)
	}
}
