package agentmon

import (
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/ringproto"
)

// A heartbeat that changes nothing costs the daemon next to nothing (issue
// 28): once a monitor's agent is connected and confirmed, its backend
// pushes the ring's bytes (sdk.CapRingPush), and nothing waits to be parsed
// or retried, the monitor is "steady". A pushed heartbeat that is exactly
// the current word's line is then taken in by the event's caller
// (monitor.absorb): its sequence number and time are recorded and the
// instance service told of the heartbeat, with no step run, no goroutine
// woken and no timer reset. A steady monitor's timer is stopped: the
// Service's one sweep timer checks every steady monitor's last heartbeat
// each ConnectedPoll and wakes those that missed MissedHeartbeats periods,
// so "agent lost" comes as it did with a timer per monitor (between
// MissedHeartbeats and MissedHeartbeats+1 periods after the last word).
// Anything else (another word, more bytes than one line, a reboot, an
// advertisement) goes through the step as before, and the step decides
// again whether the monitor is steady.

// steadyLocked reports whether the monitor may take in heartbeats without
// a step (see above); it runs on the step goroutine with bgMu held.
func (m *monitor) steadyLocked(now time.Time) bool {
	_, records := m.svc.cfg.Instances.(HeartbeatRecorder)
	return records && m.pushed.seen && len(m.pushed.data) == 0 &&
		m.tr.state == instance.AgentConnected && m.tr.confirmed &&
		m.pending == "" && !m.ring.paused(now) && m.parser.Clear() &&
		m.gen.Load() == m.seenGen
}

// absorbLocked takes in a pushed ring read of sequence number seq when it is the
// steady monitor's heartbeat: exactly one line of the current word, the
// next push in order, no step running and nothing else waiting; a push
// of no bytes too (it says nothing: t is then zero). It reports false when
// the push must go through the step (pushedRing.add). bgMu is held.
func (m *monitor) absorbLocked(data []byte, seq uint64) (t time.Time, ok bool) {
	if m.steadyWord == "" || m.stepping || seq <= m.pushed.seq || len(m.pushed.data) > 0 ||
		(len(data) > 0 && !ringproto.IsLine(data, m.steadyWord)) {
		return time.Time{}, false
	}
	m.pushed.seq = seq
	if len(data) == 0 {
		return time.Time{}, true
	}
	now := m.svc.cfg.Now()
	m.beat.store(now)
	return now, true
}

// heartbeat tells the instance service of a heartbeat absorbed at t (and
// the metrics of the read). A service that finds the state changed
// meanwhile (RecordHeartbeat false) is left alone: state changes are the
// step's, which reports them itself.
func (m *monitor) heartbeat(n int, t time.Time) {
	cfg := &m.svc.cfg
	cfg.RingObserver.RingRead(m.backend, n, 1)
	if hr, ok := cfg.Instances.(HeartbeatRecorder); ok {
		hr.RecordHeartbeat(m.uuid, instance.AgentConnected, t)
	}
}

// beatSeen carries the last absorbed heartbeat into the tracker (the step
// goroutine owns it).
func (m *monitor) beatSeen() {
	if b := m.beat.load(); b.After(m.tr.lastBeat) {
		m.tr.lastBeat = b
	}
}

// armSweep starts the Service's sweep timer unless it runs.
func (s *Service) armSweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.sweep != nil || s.sweepDone {
		return
	}
	s.sweep = time.AfterFunc(s.cfg.ConnectedPoll, s.sweepOnce)
}

// sweepOnce wakes every steady monitor whose agent missed MissedHeartbeats
// periods (the step then finds it lost), and sets the timer again: once
// armed it fires every ConnectedPoll until Close, one timer for all.
func (s *Service) sweepOnce() {
	s.mu.Lock()
	ms := make([]*monitor, 0, len(s.monitors))
	for _, m := range s.monitors {
		if m.steady.Load() {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	lostAfter := time.Duration(s.cfg.MissedHeartbeats) * s.cfg.Heartbeat
	now := s.cfg.Now()
	for _, m := range ms {
		if now.Sub(m.beat.load()) >= lostAfter {
			m.wake(&m.wakeSweep)
		}
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if !s.sweepDone {
		s.sweep.Reset(s.cfg.ConnectedPoll)
	}
}

// stopSweep stops the sweep timer for good (Close).
func (s *Service) stopSweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.sweepDone = true
	if s.sweep != nil {
		s.sweep.Stop()
		s.sweep = nil
	}
}
