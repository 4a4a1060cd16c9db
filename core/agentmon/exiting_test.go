package agentmon

import (
	"context"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// TestGuestExitingReadsLastWords: a steady monitor (no timed ring read)
// of a guest whose process ended is asked for its last words; the ring
// holds the agent's STOPPED with no event announcing it (QEMU's port event
// can come after QEMU is gone, or never). GuestExiting returns only once
// that word is read and recorded: the state is checked right after the
// call, without waiting. A halted monitor's GuestExiting returns at once.
func TestGuestExitingReadsLastWords(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.settle(g)
	e.waitState(g, instance.AgentConnected)

	g.ring.write("STOPPED\n")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	e.svc.GuestExiting(ctx, g.inst)
	if ctx.Err() != nil {
		t.Fatal("GuestExiting returned at its deadline, not after the read")
	}
	if got := e.insts.lastState(g.inst.UUID); got != instance.AgentStopped {
		t.Fatalf("agent state recorded when GuestExiting returned: %q, want %q", got, instance.AgentStopped)
	}

	e.svc.GuestStopped(g.inst)
	reads := g.ring.readCount()
	e.svc.GuestExiting(ctx, g.inst) // no monitor: nothing to read
	if ctx.Err() != nil || g.ring.readCount() != reads {
		t.Errorf("GuestExiting of a stopped guest read the ring (%d reads, were %d) or waited (%v)", g.ring.readCount(), reads, ctx.Err())
	}
}
