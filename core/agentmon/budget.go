package agentmon

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/ringproto"
)

// Defaults of the ring read budget (Config.Ring*). A real agent writes a
// word of at most 10 bytes at start, at each change and every heartbeat
// (5 s): well under a line and a few bytes per second. The defaults leave
// room for a thousand times that and for bursts of several full reads.
const (
	DefaultRingBytesPerSecond = 4096
	DefaultRingBurstBytes     = 4 * RingReadMax
	DefaultRingLinesPerSecond = 20
	DefaultRingBurstLines     = 100
	// readCost is the least a ring read costs of the byte budget, whatever
	// it returned: a read is a round trip to the backend, and a ring holds
	// as little as 16 bytes (QEMU's, as LXD sets it), so a flood is many
	// small reads. It bounds reads to RingBytesPerSecond/readCost per second
	// (16 with the default) while a real agent needs a few.
	readCost = 256
	// throttleQuiet is how long a guest must stay within a budget before
	// going over it again starts a new throttling episode (and a new
	// event).
	throttleQuiet = 10 * time.Second
)

// Throttles records that a guest went over a budget
// (*instance.Manager implements it).
type Throttles interface {
	// GuestThrottled records, once per throttling episode, that the guest
	// of the instance with the given uuid went over budget
	// (instance.BudgetRing or instance.BudgetState) and that what it sent
	// beyond is dropped; detail says what and how much.
	GuestThrottled(ctx context.Context, uuid, budget, detail string) error
}

var _ Throttles = (*instance.Manager)(nil)

// ringBudget is one guest's ring read budget: bytes and lines per second.
// A read over it is dropped without being parsed and pauses the reads
// until the budget holds a full read again. It is owned by the monitor's
// run goroutine, except pausedUntil, read by kickRead.
type ringBudget struct {
	bytes *rate.Limiter
	lines *rate.Limiter
	// resumeAt: no ring read before it (zero: not paused).
	resumeAt time.Time
	// pausedUntil mirrors resumeAt (UnixNano) for kickRead: backend events
	// of a paused guest do not even wake the monitor.
	pausedUntil atomicTime
	ep          episode
	dropped     uint64 // bytes dropped in the current episode
}

func newRingBudget(cfg *Config) ringBudget {
	return ringBudget{
		bytes: rate.NewLimiter(rate.Limit(cfg.RingBytesPerSecond), cfg.RingBurstBytes),
		lines: rate.NewLimiter(rate.Limit(cfg.RingLinesPerSecond), cfg.RingBurstLines),
	}
}

// paused reports whether reads are paused at now.
func (b *ringBudget) paused(now time.Time) bool {
	return !b.resumeAt.IsZero() && now.Before(b.resumeAt)
}

// admit takes data's bytes (at least readCost) and lines from the budget
// at now and reports whether they fit. When they do not, nothing is taken, reads pause until
// the budget holds a full read (RingReadMax bytes, half the line burst)
// and the caller drops data unparsed.
func (b *ringBudget) admit(data []byte, now time.Time) bool {
	lines := bytes.Count(data, []byte{'\n'})
	r := b.bytes.ReserveN(now, max(len(data), readCost))
	if r.OK() && r.DelayFrom(now) == 0 {
		if lines == 0 || b.lines.AllowN(now, lines) {
			return true
		}
		r.CancelAt(now)
	} else if r.OK() {
		r.CancelAt(now)
	}
	b.dropped += uint64(len(data))
	wait := max(untilTokens(b.bytes, now, RingReadMax), untilTokens(b.lines, now, max(b.lines.Burst()/2, 1)))
	b.resumeAt = now.Add(wait)
	b.pausedUntil.store(b.resumeAt)
	return false
}

// untilTokens is how long from now until l holds n tokens.
func untilTokens(l *rate.Limiter, now time.Time, n int) time.Duration {
	n = min(n, l.Burst())
	missing := float64(n) - l.TokensAt(now)
	if missing <= 0 || l.Limit() <= 0 {
		return 0
	}
	return time.Duration(missing / float64(l.Limit()) * float64(time.Second))
}

// episode tracks one throttling episode of one budget: it starts at the
// first refusal and lasts while refusals come less than throttleQuiet
// apart, so it is reported once however long the guest keeps at it.
type episode struct {
	last time.Time // last refusal
}

// refuse notes a refusal at now and reports whether it starts an episode.
func (e *episode) refuse(now time.Time) bool {
	start := e.last.IsZero() || now.Sub(e.last) >= throttleQuiet
	e.last = now
	return start
}

// readRing reads the ring once, within the guest's ring budget, and
// applies the last complete word within its state-change budget. It
// reports whether any bytes were read. A read over the ring budget is
// dropped unparsed and pauses reads (see ringBudget); a word that would
// change the agent state beyond the state budget is kept pending and
// applied once the budget allows, unless a newer word replaces it: the
// last word wins.
func (m *monitor) readRing() bool {
	cfg := &m.svc.cfg
	now := time.Now()
	var data []byte
	if !m.ring.paused(now) {
		data = m.readRingData()
		if !m.ring.admit(data, now) {
			cfg.RingObserver.RingDropped(m.backend, len(data))
			// Dropped unparsed: the carried partial line no longer
			// continues what comes next.
			m.parser = ringproto.Parser{}
			if m.ring.ep.refuse(now) {
				m.throttled(instance.BudgetRing, fmt.Sprintf(
					"ring reads over budget (%g bytes and %g lines per second): reads paused, excess dropped",
					cfg.RingBytesPerSecond, cfg.RingLinesPerSecond))
			}
			return true
		}
	}
	if len(data) > 0 {
		cfg.RingObserver.RingRead(m.backend, len(data), bytes.Count(data, []byte{'\n'}))
	}
	w, ok := m.parser.Feed(data)
	if !ok {
		if m.pending == "" {
			return len(data) > 0
		}
		w = m.pending // retry the word the state budget held back
	}
	m.pending = ""
	if wordState(w) != m.tr.state && !m.svc.budget.Allow(m.uuid) {
		m.pending = w
		m.pendingAt = now.Add(max(m.svc.budget.Wait(m.uuid), time.Millisecond))
		if m.stateEp.refuse(now) {
			m.throttled(instance.BudgetState, fmt.Sprintf(
				"agent state changes over budget (%g per second, bursts of %d): words dropped, the last one applied when the budget allows",
				m.svc.budget.Rate(), m.svc.budget.Burst()))
		}
		return len(data) > 0
	}
	hbt := cfg.Now()
	_, advertise := m.tr.word(w, hbt)
	m.report(m.tr.state, hbt)
	if advertise {
		m.requestAdvertFor(false, w == ringproto.Connected)
	}
	return true
}

// readRingData reads up to RingReadMax bytes of the ring: the bytes the
// backend pushed with its events (push.go) once it pushes, else a ReadRing
// call.
func (m *monitor) readRingData() []byte {
	if data, ok := m.takePushed(); ok {
		return data
	}
	cfg := &m.svc.cfg
	ctx, cancel := context.WithTimeout(m.ctx, cfg.RequestTimeout)
	defer cancel()
	backend, handle, err := cfg.Instances.Runtime(ctx, m.uuid)
	if err != nil {
		cfg.Logger.Debug("agentmon: no runtime for ring read", "instance", m.name, "err", err)
		return nil
	}
	var data []byte
	if b := m.svc.batcher(backend); b != nil {
		data, err = b.read(ctx, handle, RingReadMax)
	} else {
		data, err = backend.ReadRing(ctx, handle, RingReadMax)
	}
	if err != nil {
		cfg.Logger.Debug("agentmon: reading ring buffer", "instance", m.name, "err", err)
		return nil
	}
	return data
}

// wordState is the agent state a word declares.
func wordState(w ringproto.Word) instance.AgentState {
	switch w {
	case ringproto.Started:
		return instance.AgentStarted
	case ringproto.Connected:
		return instance.AgentConnected
	case ringproto.Stopped:
		return instance.AgentStopped
	}
	return instance.AgentNone
}

// throttled logs and records the start of a throttling episode.
func (m *monitor) throttled(budget, detail string) {
	cfg := &m.svc.cfg
	cfg.Logger.Warn("agentmon: guest over budget", "instance", m.name, "budget", budget, "detail", detail)
	if cfg.Throttles == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	defer cancel()
	if err := cfg.Throttles.GuestThrottled(ctx, m.uuid, budget, detail); err != nil {
		cfg.Logger.Warn("agentmon: recording throttled guest", "instance", m.name, "err", err)
	}
}

// pollLimits bends the next timed read around the budgets: not before the
// ring reads resume, and no later than a pending word's retry.
func (m *monitor) pollLimits(d time.Duration) time.Duration {
	now := time.Now()
	if m.ring.paused(now) {
		d = max(d, m.ring.resumeAt.Sub(now))
	}
	if m.pending != "" {
		d = min(d, max(m.pendingAt.Sub(now), 0))
	}
	return d
}

// atomicTime is a time read and written atomically (as UnixNano).
type atomicTime struct{ ns atomic.Int64 }

func (a *atomicTime) store(t time.Time) { a.ns.Store(t.UnixNano()) }

// load returns the stored time (the zero time when none was stored).
func (a *atomicTime) load() time.Time {
	ns := a.ns.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// after reports whether the stored time is after t.
func (a *atomicTime) after(t time.Time) bool { return a.ns.Load() > t.UnixNano() }
