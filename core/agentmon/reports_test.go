package agentmon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// reportLanded waits until the guest's agent was asked for its state n
// times and the fetch that asked last has landed in the cache.
func (e *env) reportLanded(g *guest, n int) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d GET /1.0/state at %s's agent", n, g.inst.Name), func() bool { return g.agent.gets() >= n })
	m := e.svc.monitor(g.inst.UUID)
	m.guest.mu.Lock()
	done := m.guest.running
	m.guest.mu.Unlock()
	if done != nil {
		<-done
	}
}

// connect runs the guest and feeds its agent's words up to CONNECTED.
func (e *env) connect(g *guest) {
	e.t.Helper()
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "STARTED\n")
	e.waitState(g, instance.AgentStarted)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
}

// fetchRunning reports whether a fetch of the guest's report runs.
func (e *env) fetchRunning(g *guest) bool {
	m := e.svc.monitor(g.inst.UUID)
	m.guest.mu.Lock()
	defer m.guest.mu.Unlock()
	return m.guest.running != nil
}

// TestListStartsNoAgentCall: a list of guests whose reports are all older
// than GuestStateTTL reads the cache (CachedGuest, CachedIPv4) and starts
// no call to any agent, whatever the reports' age. Before, CachedGuest
// started a background refresh per stale row (up to 8 at once), so lists
// kept TLS connections to the agents running beside them: the fetch is
// started inside the call, so "no fetch running" right after the list and
// the agents' request counts prove nothing was started. A single
// instance's view (RefreshGuest) still refreshes a stale report.
func TestListStartsNoAgentCall(t *testing.T) {
	e := newEnv(t, nil)
	const n = 12
	gs := make([]*guest, n)
	for i := range gs {
		gs[i] = e.guest(fmt.Sprintf("vm%d", i))
		e.connect(gs[i])
		e.reportLanded(gs[i], 1) // the connection's refresh
	}
	e.clock.advance(GuestStateTTL) // every report is stale now (and no agent lost: 3 heartbeats)
	for round := range 3 {
		for _, g := range gs {
			info := e.svc.CachedGuest(g.inst.UUID)
			if info == nil || info.State.IPv4() != "10.0.2.15" || info.UpdatedAt == nil {
				t.Fatalf("round %d: cached report of %s: %+v", round, g.inst.Name, info)
			}
			if ip := e.svc.CachedIPv4(g.inst.UUID); ip != "10.0.2.15" {
				t.Fatalf("round %d: CachedIPv4(%s) = %q", round, g.inst.Name, ip)
			}
			if e.fetchRunning(g) {
				t.Fatalf("round %d: listing %s started a fetch of its stale report", round, g.inst.Name)
			}
		}
	}
	for _, g := range gs {
		if got := g.agent.gets(); got != 1 {
			t.Errorf("%s's agent got %d GET /1.0/state, want 1 (the connection's; none from 3 lists)", g.inst.Name, got)
		}
	}
	// A single instance's view refreshes its stale report in the
	// background, and only that one.
	if info := e.svc.RefreshGuest(gs[0].inst.UUID); info == nil || info.State.Hostname != "fake-1" {
		t.Fatalf("RefreshGuest: %+v", info)
	}
	e.reportLanded(gs[0], 2)
	if info := e.svc.CachedGuest(gs[0].inst.UUID); info == nil || info.State.Hostname != "fake-2" {
		t.Fatalf("report after RefreshGuest: %+v", info)
	}
	if got := gs[1].agent.gets(); got != 1 {
		t.Errorf("another guest's agent got %d GET /1.0/state, want 1", got)
	}
}

// TestReportRefreshedOnConnect: the agent's connection is the signal that
// refreshes its report: the first CONNECTED, and CONNECTED again after
// the agent stopped; heartbeats (CONNECTED repeated) are not.
func TestReportRefreshedOnConnect(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.connect(g)
	e.reportLanded(g, 1)
	if ip := e.svc.CachedIPv4(g.inst.UUID); ip != "10.0.2.15" {
		t.Fatalf("CachedIPv4 after the connection's refresh = %q", ip)
	}
	e.clock.advance(GuestStateTTL)
	for range 3 {
		e.feed(g, "CONNECTED\n")
	}
	e.quiet(g)
	if e.fetchRunning(g) || e.svc.reports.pending() != 0 || g.agent.gets() != 1 {
		t.Fatalf("heartbeats asked for the report: fetch running %v, %d queued, %d GET /1.0/state",
			e.fetchRunning(g), e.svc.reports.pending(), g.agent.gets())
	}
	e.feed(g, "STOPPED\n")
	e.waitState(g, instance.AgentStopped)
	if e.svc.CachedGuest(g.inst.UUID) != nil || e.svc.CachedIPv4(g.inst.UUID) != "" {
		t.Fatal("a report is listed for an agent that is not connected")
	}
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	e.reportLanded(g, 2)
	if info := e.svc.CachedGuest(g.inst.UUID); info == nil || info.State.Hostname != "fake-2" {
		t.Fatalf("report after the agent connected again: %+v", info)
	}
}

// TestReportRetryWithoutAddress: a report without an address (the guest's
// network not up when its agent connected) is refreshed again after
// ReportRetry, then twice as long each time; once the address shows, the
// retries stop. A retry whose wait would pass reportRetryMax is not
// scheduled.
func TestReportRetryWithoutAddress(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReportRetry = 20 * time.Millisecond })
	g := e.guest("vm1")
	g.agent.mu.Lock()
	g.agent.noAddr = true
	g.agent.mu.Unlock()
	e.connect(g)
	e.reportLanded(g, 3) // the connection's refresh and two retries
	if ip := e.svc.CachedIPv4(g.inst.UUID); ip != "" {
		t.Fatalf("CachedIPv4 without an address = %q", ip)
	}
	g.agent.mu.Lock()
	g.agent.noAddr = false
	g.agent.mu.Unlock()
	waitFor(t, "the address after a retry", func() bool { return e.svc.CachedIPv4(g.inst.UUID) == "10.0.2.15" })
	m := e.svc.monitor(g.inst.UUID)
	m.guest.mu.Lock()
	retry, retries := m.guest.retry, m.guest.retries
	m.guest.mu.Unlock()
	if retry != nil || retries != 0 {
		t.Fatalf("a retry is scheduled after the address showed (retries %d)", retries)
	}
	g.agent.mu.Lock()
	times := append([]time.Time(nil), g.agent.stateTimes...)
	g.agent.mu.Unlock()
	for i := 2; i < len(times); i++ {
		// The retries' waits double: 20 ms, 40 ms, 80 ms...
		if want := 20 * time.Millisecond << (i - 2); times[i].Sub(times[i-1]) < want {
			t.Errorf("retry %d came %v after the fetch before, want at least %v", i-1, times[i].Sub(times[i-1]), want)
		}
	}

	// The bound: past reportRetryMax no retry is scheduled.
	m.guest.mu.Lock()
	m.guest.ipv4 = ""
	m.guest.retries = 30
	m.afterFetchLocked(m.guest.info)
	retry = m.guest.retry
	m.guest.mu.Unlock()
	if retry != nil {
		t.Fatal("a retry was scheduled past reportRetryMax")
	}
}

// TestReportRefreshBounds: a storm of connections is a queue: the
// refresher runs at most reportRefreshes fetches at once, and starts two
// at least 1/ReportRate apart.
func TestReportRefreshBounds(t *testing.T) {
	t.Run("at-once", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.ReportRate = 1000 })
		stall := make(chan struct{})
		const n = reportRefreshes + 3
		gs := make([]*guest, n)
		for i := range gs {
			gs[i] = e.guest(fmt.Sprintf("vm%d", i))
			e.connect(gs[i])
			e.reportLanded(gs[i], 1) // the advertisement's
			e.quiet(gs[i])
		}
		// Every report wanted again at once, as their retries want them,
		// while the agents hold GET /1.0/state.
		for _, g := range gs {
			g.agent.mu.Lock()
			g.agent.stall = stall
			g.agent.mu.Unlock()
			m := e.svc.monitor(g.inst.UUID)
			m.guest.mu.Lock()
			m.guest.wants++
			m.guest.mu.Unlock()
			e.svc.reports.want(m)
		}
		total := func() int {
			s := 0
			for _, g := range gs {
				s += g.agent.gets() - 1
			}
			return s
		}
		waitFor(t, "reportRefreshes fetches held by the agents", func() bool { return total() == reportRefreshes })
		// The refresher waits for a slot: the others are still queued
		// (or taken off the queue, waiting for a slot), none started.
		if got := len(e.svc.reports.slots); got != reportRefreshes {
			t.Fatalf("%d slots taken, want %d", got, reportRefreshes)
		}
		running := 0
		for _, g := range gs {
			if e.fetchRunning(g) {
				running++
			}
		}
		if running != reportRefreshes || total() != reportRefreshes {
			t.Fatalf("%d fetches running, %d GET /1.0/state, want %d", running, total(), reportRefreshes)
		}
		close(stall)
		for _, g := range gs {
			e.reportLanded(g, 2)
		}
	})
	t.Run("rate", func(t *testing.T) {
		// The refresher alone, on synctest's clock: its fetches recorded,
		// each ended at once.
		synctest.Test(t, func(t *testing.T) {
			const rate = 20 // 50 ms apart
			r := newRefresher(rate, newAdvGate(DefaultMaxAdvertising))
			var mu sync.Mutex
			var starts []time.Duration
			t0 := time.Now()
			r.fetch = func(_ *monitor, release func()) bool {
				mu.Lock()
				starts = append(starts, time.Since(t0))
				mu.Unlock()
				release()
				return true
			}
			ms := make([]*monitor, 5)
			for i := range ms {
				ms[i] = &monitor{}
				r.want(ms[i])
				r.want(ms[i]) // asked twice before its turn: refreshed once
			}
			synctest.Wait()
			time.Sleep(time.Second) // fake time: every refresh is due by then
			synctest.Wait()
			r.close()
			want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}
			if !slices.Equal(starts, want) {
				t.Fatalf("refreshes started at %v, want %v", starts, want)
			}
		})
	})
}

// TestReportOneConnection: a report's two requests (GET /1.0 and GET
// /1.0/state) share one connection, so a refresh costs the daemon one TLS
// handshake with the agent; before, each request dialled its own.
func TestReportOneConnection(t *testing.T) {
	e := newEnv(t, nil)
	g := e.guest("vm1")
	e.connect(g)
	e.reportLanded(g, 1)
	e.settle(g) // no advertisement under way: every connection from now on is the report's
	c0 := g.agent.connCount()
	e.clock.advance(GuestStateTTL)
	if info, ok := e.svc.Guest(context.Background(), g.inst.UUID, time.Minute); !ok || info.Error != "" || info.State == nil {
		t.Fatalf("report: %+v, %v", info, ok)
	}
	if n := g.agent.connCount() - c0; n != 1 {
		t.Fatalf("a report took %d connections to the agent, want 1", n)
	}
}

// TestReportRefreshWaitsForRecovery: while the start-up recovery holds the
// advertisements, the refreshes wanted meanwhile wait (on synctest's
// clock, a fake fetch recording them); the release lets them go.
func TestReportRefreshWaitsForRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := newAdvGate(DefaultMaxAdvertising)
		r := newRefresher(DefaultReportRate, gate)
		var mu sync.Mutex
		fetched := 0
		r.fetch = func(_ *monitor, release func()) bool {
			mu.Lock()
			fetched++
			mu.Unlock()
			release()
			return true
		}
		release := gate.hold()
		for range 3 {
			r.want(&monitor{})
		}
		time.Sleep(time.Minute) // fake time: long past every refresh's turn
		synctest.Wait()
		mu.Lock()
		if fetched != 0 {
			t.Errorf("%d refreshes ran while the recovery held the advertisements", fetched)
		}
		mu.Unlock()
		release()
		time.Sleep(time.Second)
		synctest.Wait()
		r.close()
		if fetched != 3 {
			t.Errorf("%d refreshes after the release, want 3", fetched)
		}
	})
}

// TestReportRidesOnAdvertisement: a connecting agent's report is fetched on
// the connection of the advertisement it accepts (PUT /1.0, then GET /1.0
// and GET /1.0/state), before the agent's CONNECTED is read, as the real
// agent writes it after accepting; that CONNECTED then wants no refresh.
// A connecting guest costs the daemon one TLS connection, not two, and the
// refresher has nothing left to do once the guests connected. Before, the
// refresher fetched every report on a connection of its own, at most 50 a
// second: a fleet launched faster left refreshes running afterwards.
func TestReportRidesOnAdvertisement(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 3 {
		g := e.guest(fmt.Sprintf("vm%d", i))
		e.svc.GuestRunning(g.inst, g.ep)
		e.feed(g, "STARTED\n")
		e.waitState(g, instance.AgentStarted)
		e.reportLanded(g, 1) // with the advertisement, no CONNECTED yet
		e.feed(g, "CONNECTED\n")
		e.waitState(g, instance.AgentConnected)
		e.quiet(g)
		if ip := e.svc.CachedIPv4(g.inst.UUID); ip != "10.0.2.15" {
			t.Fatalf("%s: CachedIPv4 = %q, want the advertisement's report's", g.inst.Name, ip)
		}
		if q := e.svc.reports.pending(); q != 0 || e.fetchRunning(g) {
			t.Fatalf("%s: the CONNECTED after the advertisement's report wanted another: %d queued, fetch running %v",
				g.inst.Name, q, e.fetchRunning(g))
		}
		// The new monitor's PUT and the one the STARTED asks for: one
		// connection each, the report on one of them.
		if gets, conns, puts := g.agent.gets(), g.agent.connCount(), len(g.agent.puts()); gets != 1 || conns != puts {
			t.Fatalf("%s: %d GET /1.0/state on %d connections with %d PUT /1.0, want 1 on the PUTs' connections", g.inst.Name, gets, conns, puts)
		}
	}
}

// TestReportWantedBeforeAdvertisement: after a daemon restart an agent's
// CONNECTED (its heartbeat) is read before its advertisement, which the
// recovery holds: the report is wanted and queued; the advertisement the
// hold released does not fetch it (those advertisements bound a restart
// of 10,000), the refresher does, once, on a connection of its own (the
// refresher's goroutine ends with its queue empty, the agent asked once). A refresh is wanted again when the agent comes
// back after it stopped (no advertisement then): the refresher fetches it.
func TestReportWantedBeforeAdvertisement(t *testing.T) {
	e := newEnv(t, nil)
	release := e.svc.HoldAdvertisements()
	g := e.guest("vm1")
	e.svc.GuestRunning(g.inst, g.ep)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	if m := e.svc.monitor(g.inst.UUID); !m.reportDue() {
		t.Fatal("no report wanted after the CONNECTED")
	}
	release()
	e.reportLanded(g, 1)
	refresherIdle := func() bool {
		r := e.svc.reports
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.running
	}
	waitFor(t, "the refresher's queue drained", refresherIdle)
	e.quiet(g)
	if n := g.agent.gets(); n != 1 || e.fetchRunning(g) {
		t.Fatalf("%d GET /1.0/state (fetch running %v), want 1", n, e.fetchRunning(g))
	}
	if conns, puts := g.agent.connCount(), len(g.agent.puts()); conns != puts+1 {
		t.Fatalf("%d connections for %d PUT /1.0 and one report, want the report on a connection of its own (not the released advertisement's)", conns, puts)
	}
	if ip := e.svc.CachedIPv4(g.inst.UUID); ip != "10.0.2.15" {
		t.Fatalf("CachedIPv4 = %q", ip)
	}
	e.feed(g, "STOPPED\n")
	e.waitState(g, instance.AgentStopped)
	e.feed(g, "CONNECTED\n")
	e.waitState(g, instance.AgentConnected)
	e.reportLanded(g, 2)
}

// TestReportRefreshPacing: on synctest's clock, the refresher starts the
// due refreshes at least 1/ReportRate apart, in the order wanted, each
// once; a report served before its turn (fetch reports false) costs no
// turn, so the due ones behind it are not delayed; none is lost, and the
// refresher's goroutine ends once the queue is empty.
func TestReportRefreshPacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 10 // 100 ms apart
		r := newRefresher(rate, newAdvGate(DefaultMaxAdvertising))
		ms := make([]*monitor, 9)
		served := map[*monitor]bool{}
		for i := range ms {
			ms[i] = &monitor{name: fmt.Sprint("vm", i)}
			served[ms[i]] = i%3 == 1 // vm1, vm4, vm7: served by their advertisements
		}
		var mu sync.Mutex
		var order []string
		var starts []time.Duration
		t0 := time.Now()
		r.fetch = func(m *monitor, release func()) bool {
			defer release()
			if served[m] {
				return false
			}
			mu.Lock()
			order = append(order, m.name)
			starts = append(starts, time.Since(t0))
			mu.Unlock()
			return true
		}
		for _, m := range ms {
			r.want(m)
		}
		for _, m := range ms {
			r.want(m) // asked again before its turn: once
		}
		synctest.Wait()
		time.Sleep(time.Second) // fake time: every refresh is due by then
		synctest.Wait()
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		r.close()
		if running {
			t.Error("the refresher's goroutine runs with an empty queue")
		}
		wantOrder := []string{"vm0", "vm2", "vm3", "vm5", "vm6", "vm8"}
		if !slices.Equal(order, wantOrder) {
			t.Fatalf("refreshed %v, want %v (the due ones, each once, in order)", order, wantOrder)
		}
		for i, s := range starts {
			if want := time.Duration(i) * 100 * time.Millisecond; s != want {
				t.Errorf("refresh %d (%s) started at %v, want %v: a served report took a turn or the rate broke", i, order[i], s, want)
			}
		}
	})
}
