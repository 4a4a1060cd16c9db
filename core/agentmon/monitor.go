package agentmon

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/ringproto"
)

// monitor watches one running instance. It keeps no goroutine while idle:
// a timer (time.AfterFunc) and the wake-ups (a backend event, a reboot, an
// advertisement's result) start a step goroutine, which runs the monitor's
// steps one at a time until no wake-up is left, then ends; it owns the ring
// parser and the tracker. An advertiser goroutine makes the PUT /1.0 calls
// (at most one per AdvertiseInterval) and a pusher goroutine delivers guest
// events in order, so a slow agent never delays ring reads; they too run
// only while they have work. A daemon of 10,000 idle guests keeps no
// goroutine for them, and once their agents are steady (liveness.go) no
// running timer either: one sweep timer per Service watches their
// heartbeats.
type monitor struct {
	svc     *Service
	uuid    string
	name    string
	backend string // the instance's backend, for RingObserver
	client  *agentClient

	stop     chan struct{}
	stopOnce sync.Once
	// ctx ends when the monitor is halted: every ring read and call to
	// the agent is made under it, so a halt (the guest stopped, the daemon
	// stopping) ends them at once instead of after RequestTimeout.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	timer  *time.Timer // the timed ring read; wakes a step

	// bgMu guards the on-demand goroutines' work and their starts.
	bgMu       sync.Mutex
	stopped    bool        // halt was called: start nothing more
	stepping   bool        // the step goroutine runs
	wakeKick   bool        // read the ring now (a backend event)
	wakeTimer  bool        // the timer fired
	wakeReset  bool        // the guest rebooted
	wakeSweep  bool        // the sweep found a steady monitor's heartbeats missed (liveness.go)
	advResults []advResult // PUT /1.0 results not yet applied, in order
	advQueued  bool        // an advertisement is asked for (coalesced)
	advRunning bool        // the advertiser goroutine runs
	advLast    time.Time   // when the last PUT /1.0 began
	evQueue    [][]byte    // guest events waiting, at most eventQueue
	evRunning  bool        // the pusher goroutine runs
	pushed     pushedRing  // ring bytes sent with the backend's events (push.go)
	// advTaken: the advertiser took the queued request and its PUT /1.0
	// has no result yet (it may still wait for AdvertiseInterval or the
	// gate). A CONNECTED of an agent not yet confirmed asks for no other
	// meanwhile (requestAdvertFor).
	advTaken bool
	// lastWords are closed after a step that began after they were
	// added: callers of readLastWords waiting for a ring read.
	lastWords []chan struct{}
	// steadyWord is the word whose pushed line alone changes nothing
	// while the monitor is steady, "" otherwise (liveness.go).
	steadyWord ringproto.Word

	// steady mirrors steadyWord != "" for the sweep; beat is the last
	// heartbeat taken in without a step (cfg.Now's clock).
	steady atomic.Bool
	beat   atomicTime
	// stepsRun counts the steps run (tests prove with it that a heartbeat
	// took none).
	stepsRun atomic.Uint64

	// gen counts advertisement changes; a PUT result counts only for the
	// generation it was made for.
	gen atomic.Uint64
	// advPending counts advertisement requests queued or being served: at
	// zero no PUT /1.0 is coming (tests prove "nothing happened" with it).
	advPending atomic.Int64

	stateMu sync.Mutex
	state   instance.AgentState
	// connectedNow mirrors state == AgentConnected for the readers that
	// take no lock (CachedIPv4, a list's every row).
	connectedNow atomic.Bool

	devMu   sync.Mutex
	devices map[string]map[string]string // as last told to the guest

	guest guestCache // what the agent reports of the guest (guest.go)

	// Owned by the step goroutine.
	seenGen uint64    // the advertisement generation the tracker follows
	due     time.Time // when the timer was last set to fire
	parser  ringproto.Parser
	tr      tracker
	quiet   time.Duration // the current backed-off fast period (see nextPoll)
	ring    ringBudget
	// pending is a word the state budget held back, retried at pendingAt
	// unless a newer word replaces it.
	pending   ringproto.Word
	pendingAt time.Time
	stateEp   episode
}

type advResult struct {
	gen uint64
	err error
}

func newMonitor(s *Service, inst *instance.Instance, certs *pki.InstanceCerts) *monitor {
	ctx, cancel := context.WithCancel(context.Background())
	return &monitor{
		ctx:     ctx,
		cancel:  cancel,
		svc:     s,
		uuid:    inst.UUID,
		name:    inst.Name,
		backend: inst.Backend,
		client:  newAgentClient(s.cfg.Links, inst.UUID, certs, s.cfg.Now),
		stop:    make(chan struct{}),
		devices: guestview.Devices(inst),
		ring:    newRingBudget(&s.cfg),
	}
}

// start reads the ring at once, then as the timer says.
func (m *monitor) start() {
	m.seenGen = m.gen.Load()
	m.bgMu.Lock()
	m.timer = time.AfterFunc(time.Hour, m.timerFired)
	m.bgMu.Unlock()
	m.wake(&m.wakeTimer)
}

// timerFired is the timer's function.
func (m *monitor) timerFired() { m.wake(&m.wakeTimer) }

// wake sets the wake-up flag *what (guarded by bgMu) and starts the step
// goroutine unless it runs (it sees the flag before it ends).
func (m *monitor) wake(what *bool) {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.stopped {
		return
	}
	*what = true
	m.startStepLocked()
}

// startStepLocked starts the step goroutine unless it runs; bgMu is held.
func (m *monitor) startStepLocked() {
	if m.stepping {
		return
	}
	m.stepping = true
	m.wg.Add(1)
	m.svc.runSteps(m)
}

// halt asks the goroutines to end without waiting for them: the ring
// reads and agent calls under way are cancelled.
func (m *monitor) halt() {
	m.stopOnce.Do(func() {
		m.bgMu.Lock()
		m.stopped = true
		m.evQueue = nil
		if m.timer != nil {
			m.timer.Stop()
		}
		m.bgMu.Unlock()
		close(m.stop)
		m.cancel()
		m.stopRetry()
	})
}

func (m *monitor) wait() { m.wg.Wait() }

func (m *monitor) kickRead() {
	if m.ring.pausedUntil.after(time.Now()) {
		return // over its ring budget: the timer reads when it allows
	}
	m.wake(&m.wakeKick)
}

// requestAdvert asks the advertiser for a PUT /1.0; changed says the
// advertisement itself changed (new monitor, devlxd flag), which voids the
// agent's acceptance of the previous one.
func (m *monitor) requestAdvert(changed bool) { m.requestAdvertFor(changed, false) }

// requestAdvertFor is requestAdvert; heartbeat says the request comes from
// a CONNECTED of an agent whose acceptance is not yet confirmed, which is
// coalesced with a PUT of the same advertisement taken and not yet
// answered: its answer decides, and the CONNECTED after it confirms. The
// heartbeats that came while a restarted daemon's advertisements waited
// for their turn each asked for a second one, so every guest got two
// PUTs, each two TLS handshakes (1,000 fleet guests: about 70 of the 130
// PUTs under way were second ones). A STARTED (an agent asking for an
// advertisement, maybe restarted since the PUT was sent) is not
// coalesced.
func (m *monitor) requestAdvertFor(changed, heartbeat bool) {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if changed {
		m.gen.Add(1)
		// The agent must confirm the new advertisement: no heartbeat is
		// taken in without a step until it did.
		// (The PUT's result wakes the step, which sets the timer again.)
		m.steadyWord = ""
		m.steady.Store(false)
	}
	if m.stopped || m.advQueued || (heartbeat && !changed && m.advTaken) {
		return // coalesced with the request already queued or under way
	}
	m.advQueued = true
	m.advPending.Add(1)
	if !m.advRunning {
		m.advRunning = true
		m.wg.Add(1)
		go m.advertiser()
	}
}

func (m *monitor) currentState() instance.AgentState {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	return m.state
}

// steps runs the monitor's steps while wake-ups are pending, then ends.
func (m *monitor) steps() {
	defer m.wg.Done()
	for {
		m.bgMu.Lock()
		kick, timed, reset, results := m.wakeKick, m.wakeTimer, m.wakeReset, m.advResults
		m.wakeKick, m.wakeTimer, m.wakeReset, m.advResults = false, false, false, nil
		waiters := m.lastWords
		m.lastWords = nil
		// A timer that fired for an earlier setting (while the last step
		// ran) does not count: the step set it again.
		if timed && !m.due.IsZero() && time.Now().Before(m.due) {
			timed = false
		}
		if m.wakeSweep {
			m.wakeSweep, timed = false, true
		}
		if m.stopped || (!kick && !timed && !reset && len(results) == 0) {
			m.stepping = false
			m.bgMu.Unlock()
			closeAll(waiters)
			return
		}
		m.bgMu.Unlock()
		// Anything but the timer is something heard: poll fast again.
		m.step(kick || reset || len(results) > 0, reset, results)
		closeAll(waiters)
	}
}

// readLastWords reads the ring once more and takes in its words, and
// returns when that read's step is done (or ctx ends, or the monitor is
// halted): the guest's process ended and its last words (the agent's
// STOPPED) are taken in before its end is recorded (instance.ExitHooks).
func (m *monitor) readLastWords(ctx context.Context) {
	done := make(chan struct{})
	m.bgMu.Lock()
	if m.stopped {
		m.bgMu.Unlock()
		return
	}
	m.lastWords = append(m.lastWords, done)
	m.wakeKick = true
	m.startStepLocked()
	m.bgMu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	case <-m.stop:
	}
}

func closeAll(chs []chan struct{}) {
	for _, ch := range chs {
		close(ch)
	}
}

// step handles the wake-ups gathered since the last step: the guest's
// reboot, advertisement results, then reads the ring, checks for a lost
// agent and sets the timer.
func (m *monitor) step(heard, reset bool, results []advResult) {
	cfg := &m.svc.cfg
	m.stepsRun.Add(1)
	if reset {
		m.parser = ringproto.Parser{}
		m.tr = tracker{}
		m.pending = ""
		m.report(instance.AgentNone, time.Time{})
	}
	// A changed advertisement voids the agent's acceptance of the old
	// one; a PUT result counts only for the advertisement it sent.
	if g := m.gen.Load(); g != m.seenGen {
		m.seenGen = g
		m.tr.invalidate()
	}
	for _, res := range results {
		if res.gen == m.seenGen {
			m.tr.advertised(res.err == nil)
		}
	}
	m.beatSeen()
	if m.readRing() {
		heard = true
	}
	lostAfter := time.Duration(cfg.MissedHeartbeats) * cfg.Heartbeat
	if m.tr.check(cfg.Now(), lostAfter) {
		m.report(m.tr.state, time.Time{})
	}
	d := m.pollLimits(m.nextPoll(heard))
	now := time.Now()
	m.bgMu.Lock()
	m.due = now.Add(d)
	steady := !m.stopped && m.steadyLocked(now)
	m.steadyWord = ""
	if steady {
		// No timed read: heartbeats are taken in without a step and the
		// Service's sweep watches for missed ones (liveness.go).
		m.steadyWord = ringproto.Connected
		m.beat.store(m.tr.lastBeat)
		m.timer.Stop()
	} else if !m.stopped {
		m.timer.Reset(d)
	}
	m.steady.Store(steady)
	m.bgMu.Unlock()
	if steady {
		m.svc.armSweep()
	}
}

// nextPoll is how long to wait before the next timed ring read. Where the
// tracker asks for fast reads (no agent known, or an agent not yet
// confirmed) the period doubles from FastPoll while nothing is heard, up to
// IdlePoll without an agent and StoppedPoll with one. heard (a word, a
// backend event, an advertisement) makes it fast again. Once the agent
// accepted the advertisement it stays fast until the CONNECTED that confirms
// it: QEMU signals port changes at most once a second and not ring data, so
// the timer is what finds that CONNECTED there.
func (m *monitor) nextPoll(heard bool) time.Duration {
	cfg := &m.svc.cfg
	d := m.tr.interval(cfg.FastPoll, cfg.StoppedPoll, cfg.ConnectedPoll)
	awaitingConfirm := m.tr.state != instance.AgentNone && m.tr.advertOK && !m.tr.confirmed
	if d != cfg.FastPoll || heard || m.quiet == 0 || awaitingConfirm {
		m.quiet = d
		return d
	}
	limit := cfg.StoppedPoll
	if m.tr.state == instance.AgentNone {
		limit = cfg.IdlePoll
	}
	m.quiet = min(2*m.quiet, max(limit, cfg.FastPoll))
	return m.quiet
}

// report tells the instance service the agent state (every word is a
// heartbeat; the service records only changes).
func (m *monitor) report(st instance.AgentState, heartbeat time.Time) {
	m.stateMu.Lock()
	prev := m.state
	m.state = st
	m.connectedNow.Store(st == instance.AgentConnected)
	m.stateMu.Unlock()
	if st == instance.AgentConnected && prev != instance.AgentConnected {
		m.connected() // the agent's signal: its report is wanted (reports.go)
	} else if st != prev && st != instance.AgentConnected && st != instance.AgentStarted {
		m.notConnected()
	}
	cfg := &m.svc.cfg
	if hr, ok := cfg.Instances.(HeartbeatRecorder); ok && !heartbeat.IsZero() && hr.RecordHeartbeat(m.uuid, st, heartbeat) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	defer cancel()
	if err := cfg.Instances.SetAgentState(ctx, m.uuid, st, heartbeat); err != nil {
		level := cfg.Logger.Warn
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound) {
			level = cfg.Logger.Debug // the guest stopped meanwhile
		}
		level("agentmon: recording agent state", "instance", m.name, "state", st, "err", err)
	}
}

// advertiser makes the PUT /1.0 calls, never two within AdvertiseInterval,
// and ends when none is asked for.
func (m *monitor) advertiser() {
	defer m.wg.Done()
	cfg := &m.svc.cfg
	done := func() {
		m.bgMu.Lock()
		m.advRunning, m.advTaken = false, false
		m.bgMu.Unlock()
	}
	for {
		m.bgMu.Lock()
		if m.stopped || !m.advQueued {
			m.advRunning = false
			m.bgMu.Unlock()
			return
		}
		m.advQueued = false
		m.advTaken = true
		last := m.advLast
		m.bgMu.Unlock()
		if wait := cfg.AdvertiseInterval - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-m.stop:
				t.Stop()
				done()
				return
			case <-t.C:
			}
		}
		// The start-up recovery may hold the advertisements; those it
		// held run at most MaxAdvertising at once (advgate.go).
		slot, ok := m.svc.adv.enter(m.stop)
		if !ok {
			m.advPending.Add(-1)
			done()
			return
		}
		m.bgMu.Lock()
		m.advLast = time.Now()
		m.bgMu.Unlock()
		gen := m.gen.Load()
		// The report rides on the advertisement's connection when it
		// is wanted (reports.go), except in the burst a restart's
		// recovery released (slot): there the agents' reports are
		// refreshed after the recovery, paced (reports.go), not in the
		// 10,000 advertisements that bound the restart.
		report := !slot && m.reportWithAdvert()
		hc := m.client.httpClient()
		if report {
			hc = m.client.sessionClient()
		}
		decl, err := m.advertise(hc)
		m.svc.adv.leave(slot)
		if err != nil {
			cfg.Logger.Debug("agentmon: advertising to agent", "instance", m.name, "err", err)
		}
		// Before the advertisement's result is stepped: the guest's state
		// is back by the time the daemon counts the agent connected, or
		// the advertisement counts as failed and is made again.
		if rerr := m.restoreDeclaration(decl); rerr != nil && err == nil {
			err = rerr
		}
		m.advPending.Add(-1)
		m.bgMu.Lock()
		m.advTaken = false
		if m.stopped {
			m.advRunning = false
			m.bgMu.Unlock()
			hc.CloseIdleConnections()
			return
		}
		m.advResults = append(m.advResults, advResult{gen: gen, err: err})
		m.startStepLocked()
		m.bgMu.Unlock()
		switch {
		case report && err == nil:
			m.fetchAfterAdvert(hc)
		case report:
			m.advertFailed()
		}
		hc.CloseIdleConnections()
	}
}

// advertise sends the current advertisement to the agent through hc and
// returns the declaration the agent handed back in its answer, if any
// (redeclare.go). An answer that does not decode fails nothing: the
// advertisement was taken, only the declaration is lost (and logged).
func (m *monitor) advertise(hc *http.Client) (*devlxdapi.StatePut, error) {
	cfg := &m.svc.cfg
	ctx, cancel := context.WithTimeout(m.ctx, cfg.RequestTimeout)
	defer cancel()
	inst, err := cfg.Instances.GetByUUID(ctx, m.uuid)
	if err != nil {
		return nil, err
	}
	var header map[string]string
	if asksDeclaration(cfg.Instances, inst) {
		header = declarationInAnswer
	}
	answer, err := m.client.doOn(ctx, hc, http.MethodPut, "/1.0", m.svc.Advertisement(inst).Marshal(), header)
	if err != nil || header == nil {
		return nil, err
	}
	decl, err := parseAnswer(answer)
	if err != nil {
		cfg.Logger.Warn("agentmon: the agent's answer to its advertisement", "instance", m.name, "err", err)
	}
	return decl, nil
}

// queueEvent queues a guest event for the pusher. It reports false when the
// queue is full and the event was dropped; the caller warns once per batch.
func (m *monitor) queueEvent(typ, timestamp string, meta any) bool {
	body, err := marshalEvent(typ, timestamp, meta)
	if err != nil {
		m.svc.cfg.Logger.Error("agentmon: encoding guest event", "instance", m.name, "err", err)
		return true
	}
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.stopped {
		return true // the guest stopped: nobody to tell
	}
	if len(m.evQueue) >= eventQueue {
		return false
	}
	m.evQueue = append(m.evQueue, body)
	if !m.evRunning {
		m.evRunning = true
		m.wg.Add(1)
		go m.pusher()
	}
	return true
}

// pusher delivers queued events to the agent in order, and ends when the
// queue is empty; an event the agent cannot take is logged and dropped (as
// LXD does).
func (m *monitor) pusher() {
	defer m.wg.Done()
	cfg := &m.svc.cfg
	for {
		m.bgMu.Lock()
		if m.stopped || len(m.evQueue) == 0 {
			m.evRunning = false
			m.evQueue = nil
			m.bgMu.Unlock()
			return
		}
		body := m.evQueue[0]
		m.evQueue[0] = nil
		m.evQueue = m.evQueue[1:]
		m.bgMu.Unlock()
		ctx, cancel := context.WithTimeout(m.ctx, cfg.RequestTimeout)
		err := m.client.do(ctx, http.MethodPost, "/1.0/events", body)
		cancel()
		if err != nil {
			cfg.Logger.Warn("agentmon: pushing event to agent", "instance", m.name, "err", err)
		}
	}
}

// deviceChanges compares inst's devices with those last told to the guest
// and returns the device events, updating the record.
func (m *monitor) deviceChanges(inst *instance.Instance) []devlxdapi.DeviceEvent {
	now := guestview.Devices(inst)
	m.devMu.Lock()
	defer m.devMu.Unlock()
	var out []devlxdapi.DeviceEvent
	for _, name := range slices.Sorted(maps.Keys(m.devices)) {
		if _, ok := now[name]; !ok {
			out = append(out, devlxdapi.DeviceEvent{Action: devlxdapi.DeviceRemoved, Name: name, Config: m.devices[name]})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(now)) {
		old, ok := m.devices[name]
		switch {
		case !ok:
			out = append(out, devlxdapi.DeviceEvent{Action: devlxdapi.DeviceAdded, Name: name, Config: now[name]})
		case !maps.Equal(old, now[name]):
			out = append(out, devlxdapi.DeviceEvent{Action: devlxdapi.DeviceUpdated, Name: name, Config: now[name]})
		}
	}
	m.devices = now
	return out
}
