package agentmon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// TestGuestReport: a connected agent's report is fetched on its
// connection (no call asks for it), served from the cache within
// GuestStateTTL, and with the agent stalled Guest answers at the wait's
// end with the report before and says the agent is slow; the stalled
// fetch lands in the cache once the agent answers.
func TestGuestReport(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	ctx := context.Background()
	if _, ok := e.svc.Guest(ctx, g.inst.UUID, time.Second); ok {
		t.Fatal("a report of an instance that is not running")
	}
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	e.reportLanded(g, 1)

	info, ok := e.svc.Guest(ctx, g.inst.UUID, 30*time.Second)
	if !ok || info.Error != "" || info.State == nil || info.State.Hostname != "fake-1" || info.State.IPv4() != "10.0.2.15" ||
		strings.Join(info.Features, ",") != "files,state" {
		t.Fatalf("first report: %+v %v", info, ok)
	}
	// Within the TTL: the cache, no request.
	info, _ = e.svc.Guest(ctx, g.inst.UUID, 30*time.Second)
	if info.State.Hostname != "fake-1" {
		t.Fatalf("cached report: %+v", info.State)
	}

	// Past the TTL with the agent stalled: the answer comes at the
	// wait's end, with the old state and why.
	stall := make(chan struct{})
	g.agent.mu.Lock()
	g.agent.stall = stall
	g.agent.mu.Unlock()
	e.clock.advance(GuestStateTTL)
	info, _ = e.svc.Guest(ctx, g.inst.UUID, 50*time.Millisecond)
	if info.State == nil || info.State.Hostname != "fake-1" || !strings.Contains(info.Error, "did not answer within 50ms") {
		t.Fatalf("report with the agent stalled: %+v", info)
	}
	m := e.svc.monitor(g.inst.UUID)
	m.guest.mu.Lock()
	done := m.guest.running
	m.guest.mu.Unlock()
	if done == nil {
		t.Fatal("no fetch under way while the agent is stalled")
	}
	close(stall)
	<-done // the fetch has landed in the cache
	if c := e.svc.CachedGuest(g.inst.UUID); c == nil || c.State.Hostname != "fake-2" || c.Error != "" {
		t.Errorf("report after the stalled fetch: %+v", c)
	}
	g.agent.mu.Lock()
	gets := g.agent.stateGets
	g.agent.mu.Unlock()
	if gets != 2 {
		t.Errorf("%d GET /1.0/state, want 2 (the cache served the rest)", gets)
	}
}

// TestGuestReportOOMKills: a state with the guest's oom_kill counter is
// reported to the instance service (ReportOOMCounter); one without (0, a
// guest with no kill or a simulated one) is not.
func TestGuestReportOOMKills(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	ctx := context.Background()
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	e.reportLanded(g, 1)
	if info, ok := e.svc.Guest(ctx, g.inst.UUID, 30*time.Second); !ok || info.State == nil {
		t.Fatalf("first report: %+v %v", info, ok)
	}
	if calls := e.insts.oomCalls(g.inst.UUID); len(calls) != 0 {
		t.Fatalf("a state without oom_kills reported %v", calls)
	}
	g.agent.mu.Lock()
	g.agent.oomKills = 3
	g.agent.mu.Unlock()
	e.clock.advance(GuestStateTTL)
	if info, ok := e.svc.Guest(ctx, g.inst.UUID, 30*time.Second); !ok || info.State == nil || info.State.OOMKills != 3 {
		t.Fatalf("second report: %+v %v", info, ok)
	}
	if calls := e.insts.oomCalls(g.inst.UUID); len(calls) != 1 || calls[0] != 3 {
		t.Fatalf("ReportOOMCounter calls %v, want [3]", calls)
	}
}
