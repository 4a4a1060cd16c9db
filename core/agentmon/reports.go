package agentmon

import (
	"slices"
	"sync"
	"time"

	"github.com/guestlink/guestlink/api"
)

// Refreshing the agents' reports without lists: a list reads the cache
// only (guest.go), so something else must fill it. The signal is the
// agent's own: when a monitor sees its agent become CONNECTED (a boot, a
// reboot, the agent back after being lost, every guest after a daemon
// restart) the guest's report is wanted, and one refresher per Service
// fetches the wanted reports in the order they were asked for, at most
// Config.ReportRate a second and reportRefreshes at once: a storm of
// 10,000 connections is a queue, not 10,000 TLS connections at once. A
// report that shows no address (a guest whose network comes up after its
// agent) is wanted again after Config.ReportRetry, then after twice that
// each time, until the wait would pass reportRetryMax: a guest that never
// gets an address costs a few refreshes, not one per list. Afterwards the
// report changes only through a single instance's view (Guest,
// RefreshGuest) or the agent's next connection. While the start-up
// recovery holds the advertisements (HoldAdvertisements) the refreshes
// wait too: a restarted daemon sees every agent CONNECTED at its first
// heartbeat, and their reports are not worth slowing the recovery down.
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
	// ended (or at once when none started): monitor.fetchGuestLocked.
	fetch func(m *monitor, release func())
}

func newRefresher(rate float64, gate *advGate) *refresher {
	return &refresher{
		gate: gate,
		fetch: func(m *monitor, release func()) {
			m.guest.mu.Lock()
			m.fetchGuestLocked(release)
			m.guest.mu.Unlock()
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
		r.mu.Lock()
		r.next = time.Now().Add(r.interval)
		r.mu.Unlock()
		r.fetch(m, func() { <-r.slots })
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
		c.mu.Unlock()
		m.svc.reports.want(m)
	})
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
