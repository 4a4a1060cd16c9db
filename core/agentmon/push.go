package agentmon

// maxEarly bounds how many guests may have pushed ring bytes waiting for
// their monitor (a daemon starting while its guests heartbeat).
const maxEarly = 1 << 16

// pushedRing holds the ring bytes a backend with sdk.CapRingPush sent with
// its ring-data events (sdk.Event.Ring), until the step goroutine parses
// them: for such a backend a heartbeat costs the daemon the event alone,
// not a ReadRing call too. A monitor's is guarded by monitor.bgMu.
type pushedRing struct {
	seen bool   // the backend pushes: the ring is never read through ReadRing again
	seq  uint64 // sequence number of the last bytes taken in
	data []byte // bytes not yet parsed, oldest first, at most RingReadMax
	// stale counts pushes dropped because they came after a newer one.
	stale uint64
}

// add takes in ring bytes the backend drained with sequence number seq
// (sdk.Event.RingSeq, increasing per guest). Bytes are parsed in the order
// of seq, never in the order the events happened to arrive: a push whose
// seq is not above the last one taken in is older than what was already
// taken and is dropped, so a pushed word never applies out of order (the
// last word wins, as in a ring). At most RingReadMax bytes wait: a guest
// whose reads are paused over its budget keeps its newest bytes, as its
// ring would. It reports false when the push was dropped.
func (p *pushedRing) add(data []byte, seq uint64) bool {
	p.seen = true
	if seq <= p.seq {
		p.stale++
		return false
	}
	p.seq = seq
	p.data = append(p.data, data...)
	if over := len(p.data) - RingReadMax; over > 0 {
		p.data = append(p.data[:0], p.data[over:]...)
	}
	return true
}

// push hands pushed ring bytes of the guest uuid (of the named backend) to
// its monitor, or keeps them for the monitor GuestRunning makes (the event
// came first), and marks the backend as one that pushes. It reports
// whether the monitor needs no wake-up: the push was a steady monitor's
// heartbeat, taken in at once (liveness.go), or the monitor is halted.
func (s *Service) push(backend, uuid string, data []byte, seq uint64) bool {
	s.mu.Lock()
	if !s.pushers[backend] {
		if s.pushers == nil {
			s.pushers = map[string]bool{}
		}
		s.pushers[backend] = true
	}
	m := s.monitors[uuid]
	if m == nil {
		if s.closed {
			s.mu.Unlock()
			return true
		}
		p := s.early[uuid]
		if p == nil && len(s.early) < maxEarly {
			if s.early == nil {
				s.early = map[string]*pushedRing{}
			}
			p = &pushedRing{}
			s.early[uuid] = p
		}
		if p != nil {
			p.add(data, seq)
		}
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	return m.push(data, seq)
}

// takeEarlyLocked gives a new monitor the bytes pushed before it existed;
// s.mu is held. The monitor of a guest whose backend already pushed for
// any guest never reads its ring through ReadRing, even before its own
// first push: the backend pushes what the ring holds (a new event stream
// first sends every ring holding bytes). A restarted daemon's thousand new
// monitors otherwise read through the plugin every 250 ms until their
// guest's next heartbeat, beside the recovery's own plugin calls.
func (s *Service) takeEarlyLocked(m *monitor, backend string) {
	p := s.early[m.uuid]
	if p == nil && !s.pushers[backend] {
		return
	}
	delete(s.early, m.uuid)
	m.bgMu.Lock()
	if p != nil {
		m.pushed = *p
	}
	m.pushed.seen = true
	m.bgMu.Unlock()
}

// push takes in pushed ring bytes: a steady monitor's heartbeat at once
// (absorbLocked; it then reports true), anything else for the step
// (pushedRing.add). It reports true too when the push was dropped (older
// than one taken in: nothing to read) or the monitor is halted.
func (m *monitor) push(data []byte, seq uint64) bool {
	m.bgMu.Lock()
	if m.stopped {
		m.bgMu.Unlock()
		return true
	}
	if t, ok := m.absorbLocked(data, seq); ok {
		m.bgMu.Unlock()
		if !t.IsZero() {
			m.heartbeat(len(data), t)
		}
		return true
	}
	taken := m.pushed.add(data, seq)
	m.bgMu.Unlock()
	return !taken
}

// takePushed returns the pushed bytes not yet parsed; ok is false while the
// backend has pushed nothing (its ring is then read through ReadRing).
func (m *monitor) takePushed() (data []byte, ok bool) {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if !m.pushed.seen {
		return nil, false
	}
	data, m.pushed.data = m.pushed.data, nil
	return data, true
}
