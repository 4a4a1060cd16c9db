package agentmon

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/guestlink/guestlink/api"
)

// Refreshing the agents' reports without lists: a list reads the cache
// only (guest.go), so something else must fill it. The signal is the
// agent's own: when a monitor sees its agent become CONNECTED (a boot, a
// reboot, the agent back after being lost, every guest after a daemon
// restart) the guest's report is wanted. Most of the time the
// advertisement has already fetched it: an agent becomes CONNECTED because
// it accepted a PUT /1.0, and when the agent is not yet connected (or its
// report is wanted) the advertiser asks for GET /1.0 and GET /1.0/state on
// the PUT's own connection once the PUT is answered, so a connecting
// guest costs the daemon one TLS handshake, not two, and its report lands
// as fast as the guests connect, whatever their number (before, a
// refresher paced at 50 a second still ran half a minute after a fleet
// launched at 52 a second). That report counts for the CONNECTED that
// follows (guestCache.advReport): no refresh is wanted. A CONNECTED with
// no advertisement's report (the agent back after being lost, a failed
// fetch) wants one, and one refresher per Service fetches the wanted
// reports in the order they were asked for, at most Config.ReportRate a
// second and reportRefreshes at once: a storm of 10,000 connections is a
// queue, not 10,000 TLS connections at once. A wanted report that another
// fetch served before its turn (a restarted daemon sees each agent's
// CONNECTED before its advertisement, whose exchange then fetches it) is
// dropped from the queue at no cost, and a want that came while a fetch
// ran is queued again when it lands: none is lost. A report that shows no
// address (a guest whose network comes up after its agent) is wanted again
// after Config.ReportRetry, then after twice that each time, until the
// wait would pass reportRetryMax: a guest that never gets an address costs
// a few refreshes, not one per list. Afterwards the report changes only
// through a single instance's view (Guest, RefreshGuest) or the agent's
// next connection. While the start-up recovery holds the advertisements
// (HoldAdvertisements) the refreshes wait too: a restarted daemon sees
// every agent CONNECTED at its first heartbeat, and their reports are not
// worth slowing the recovery down.
const (
	// DefaultReportRate is Config.ReportRate's default: report refreshes
	// started per second at most across the Service.
	DefaultReportRate = 50
	// DefaultReportRetry is Config.ReportRetry's default.
	DefaultReportRetry = 5 * time.Second
	// reportRetryMax is the longest wait before a report without an
	// address is refreshed again; past it, no more retries.
	reportRetryMax = 5 * time.Minute
	// reportRefreshes is how many of the refresher's fetches run at once.
	reportRefreshes = 4
)

// refresher fetches the wanted reports (see above). Its goroutine runs
// only while reports are wanted.
type refresher struct {
	interval time.Duration // between two refreshes' starts: 1 / ReportRate
	gate     *advGate      // refreshes wait while its holds hold it
	slots    chan struct{} // one per running refresh
	quit     chan struct{} // closed by close

	mu      sync.Mutex
	queue   []*monitor
	queued  map[*monitor]bool
	running bool
	closed  bool
	next    time.Time // when the next refresh may start
	wg      sync.WaitGroup

	// fetch starts a refresh of m's report and calls release once it
	// ended (or at once when none started): monitor.fetchGuestLocked. It
	// reports false when the report was no longer due (served by another
	// fetch since it was wanted) and nothing started: that costs no turn.
	fetch func(m *monitor, release func()) bool
}

func newRefresher(rate float64, gate *advGate) *refresher {
	return &refresher{
		gate: gate,
		fetch: func(m *monitor, release func()) bool {
			c := &m.guest
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.wants <= c.served || c.advFetch {
				// Served, or to be served by the advertisement
				// under way (reports.go).
				release()
				return false
			}
			m.fetchGuestLocked(release)
			return true
		},
		interval: time.Duration(float64(time.Second) / rate),
		slots:    make(chan struct{}, reportRefreshes),
		quit:     make(chan struct{}),
		queued:   map[*monitor]bool{},
	}
}

// want queues m's report for a refresh (once however often it is asked
// for before its turn).
func (r *refresher) want(m *monitor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.queued[m] {
		return
	}
	r.queued[m] = true
	r.queue = append(r.queue, m)
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.run()
	}
}

// run fetches the queued reports, spaced by interval, until none is left
// or the refresher closes.
func (r *refresher) run() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(r.queue) == 0 || r.closed {
			r.running = false
			r.mu.Unlock()
			return
		}
		m := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		delete(r.queued, m)
		wait := time.Until(r.next)
		r.mu.Unlock()
		if m.halted() {
			continue // the guest stopped while its report waited
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.quit:
				t.Stop()
				continue // run sees closed
			}
		}
		select {
		case <-r.gate.opened():
		case <-r.quit:
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-r.quit:
			continue
		}
		start := time.Now()
		if r.fetch(m, func() { <-r.slots }) {
			r.mu.Lock()
			r.next = start.Add(r.interval)
			r.mu.Unlock()
		}
	}
}

// close ends the refresher's goroutine and refuses more wants. The
// monitors' fetches end with the monitors (Service.Close halts them).
func (r *refresher) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.quit)
	}
	r.queue, r.queued = nil, map[*monitor]bool{}
	r.mu.Unlock()
	r.wg.Wait()
}

// pending is how many reports wait for their refresh.
func (r *refresher) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// connected is the agent's signal: it became CONNECTED, so its report is
// wanted now and its retries start over.
func (m *monitor) connected() {
	c := &m.guest
	c.mu.Lock()
	if c.advReport {
		// The advertisement this CONNECTED answers fetched the report
		// (and scheduled its retry when it showed no address).
		c.advReport = false
		c.mu.Unlock()
		return
	}
	c.wants++
	c.retries = 0
	if c.retry != nil {
		c.retry.Stop()
		c.retry = nil
	}
	c.mu.Unlock()
	m.svc.reports.want(m)
}

// afterFetchLocked schedules the next refresh of a report that shows no
// address (see above), unless the agent reports no state (the guest's
// admin switched "state" off) or the retries are over. m.guest.mu is held.
func (m *monitor) afterFetchLocked(info api.GuestInfo) {
	c := &m.guest
	if c.ipv4 != "" || (info.Error == "" && !slices.Contains(info.Features, "state")) {
		c.retries = 0
		return
	}
	if c.retry != nil || m.halted() {
		return // one is already scheduled
	}
	wait := m.svc.cfg.ReportRetry << c.retries
	if wait > reportRetryMax {
		return
	}
	c.retries++
	c.retry = time.AfterFunc(wait, func() {
		c.mu.Lock()
		c.retry = nil
		c.wants++
		c.mu.Unlock()
		m.svc.reports.want(m)
	})
}

// reportDue reports whether a refresh of m's report was wanted since the
// last fetch to land started.
func (m *monitor) reportDue() bool {
	c := &m.guest
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wants > c.served
}

// reportWithAdvert reports whether the advertisement about to be sent
// should fetch the agent's report on its connection: the agent is not
// connected (its CONNECTED, which wants the report, follows an accepted
// advertisement) or its report is due
// (advertNeedsReportLocked). When it should, the refresher leaves the
// report to it (advFetch) until fetchAfterAdvert or advertFailed.
func (m *monitor) reportWithAdvert() bool {
	c := &m.guest
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advFetch = m.advertNeedsReportLocked()
	return c.advFetch
}

// advertNeedsReportLocked reports whether an accepted advertisement should
// fetch the report: its agent is not connected and no report of an
// earlier advertisement waits for its CONNECTED (a new monitor's PUT and
// the one its agent's STARTED asks for: one report), or a refresh is due.
// m.guest.mu is held.
func (m *monitor) advertNeedsReportLocked() bool {
	c := &m.guest
	return (!m.connectedNow.Load() && !c.advReport) || c.wants > c.served
}

// advertFailed is the end of an advertisement that was to fetch the
// report (reportWithAdvert) and could not: a refresh wanted meanwhile goes
// to the refresher.
func (m *monitor) advertFailed() {
	c := &m.guest
	c.mu.Lock()
	c.advFetch = false
	due := c.wants > c.served
	c.mu.Unlock()
	if due {
		m.svc.reports.want(m)
	}
}

// fetchAfterAdvert fetches the agent's report through hc, the client whose
// connection has just carried an accepted PUT /1.0 (no second TLS
// handshake), unless a fetch runs, none is needed any more or the monitor
// halted. It serves the
// wants of the CONNECTED read meanwhile, and a report fetched for an agent
// not yet connected counts for its coming CONNECTED (advReport). It runs
// on the advertiser's goroutine.
func (m *monitor) fetchAfterAdvert(hc *http.Client) {
	c := &m.guest
	c.mu.Lock()
	if c.running != nil || m.halted() || !m.advertNeedsReportLocked() {
		// A fetch runs, or none is needed any more (one landed since
		// the PUT was sent).
		c.mu.Unlock()
		m.advertFailed()
		return
	}
	c.advFetch = false
	done := make(chan struct{})
	c.running = done
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, m.svc.cfg.RequestTimeout)
	info := m.fetchGuest(ctx, hc)
	cancel()
	c.mu.Lock()
	// The report serves the wants that came while it was fetched too:
	// the CONNECTED this advertisement's acceptance sent may be read
	// before the fetch ends, and the report is as new as it.
	m.landLocked(info, c.wants)
	if info.Error == "" && !m.connectedNow.Load() {
		c.advReport = true
	}
	c.mu.Unlock()
	close(done)
}

// notConnected is the agent's stop or loss: a report fetched by an
// advertisement before no longer counts for its next CONNECTED.
func (m *monitor) notConnected() {
	c := &m.guest
	c.mu.Lock()
	c.advReport = false
	c.mu.Unlock()
}

// stopRetry stops a scheduled retry of the monitor's report (halt).
func (m *monitor) stopRetry() {
	c := &m.guest
	c.mu.Lock()
	if c.retry != nil {
		c.retry.Stop()
		c.retry = nil
	}
	c.mu.Unlock()
}

// halted reports whether halt was called.
func (m *monitor) halted() bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	return m.stopped
}
