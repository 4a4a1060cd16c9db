package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/errdefs"
)

// kindTimeline is the kind of the timeline entry that says entries were
// lost.
const kindTimeline = "timeline"

// writeRetry is how the manager retries a failed store write that records
// a change (timeline entries, a state change with its entries): a busy or
// briefly failing store (a flood of requests, a locked SQLite file, a
// PostgreSQL failover) must not lose history.
type writeRetry struct {
	initial, max time.Duration // backoff between attempts
	elapsed      time.Duration // give up after this long
	attempt      time.Duration // each attempt's own deadline
}

// defaultWriteRetry: 50ms doubling to 1s, for at most 15s, 5s per attempt.
var defaultWriteRetry = writeRetry{initial: 50 * time.Millisecond, max: time.Second, elapsed: 15 * time.Second, attempt: 5 * time.Second}

// permanent reports whether a store error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrAlreadyExists) ||
		errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, errdefs.ErrClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, record.ErrLeaseLost)
}

// retryWrite runs write until it succeeds, fails for good (permanent) or
// the retry budget is spent, and returns its last error. Each attempt gets
// its own deadline and ignores the caller's cancellation: the change it
// records is already made or about to be, whether or not the caller (an
// API request) still waits.
func (m *Manager) retryWrite(ctx context.Context, what string, write func(ctx context.Context) error) error {
	r := m.retry
	ctx = context.WithoutCancel(ctx)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = r.initial, r.max
	attempts := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		actx, cancel := context.WithTimeout(ctx, r.attempt)
		defer cancel()
		err := write(actx)
		if err != nil && permanent(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		if err != nil {
			m.log.Warn("store write failed, retrying", "what", what, "attempt", attempts, "err", err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(bo), backoff.WithMaxElapsedTime(r.elapsed))
	if err != nil {
		return fmt.Errorf("%s (%d attempts): %w", what, attempts, err)
	}
	return nil
}

// appendTimeline records timeline entries of one instance, retrying a
// failing store. Entries that are finally lost are counted: the next entries
// of the instance that can be written (here or with a state change) are
// preceded by one that says how many were lost ("timeline incomplete: N
// entries lost"), and a log line says so at once.
func (m *Manager) appendTimeline(ctx context.Context, name string, entries ...*record.TimelineEntry) {
	if len(entries) == 0 {
		return
	}
	write, lost := m.withLost(entries[0].InstanceID, entries[0].Time, entries[0].Boot, entries)
	err := m.retryWrite(ctx, fmt.Sprintf("recording the timeline of instance %q", name), func(ctx context.Context) error {
		return m.store.AppendTimeline(ctx, write...)
	})
	if err != nil {
		m.lostMu.Lock()
		m.lost[entries[0].InstanceID] += len(entries)
		total := m.lost[entries[0].InstanceID]
		m.lostMu.Unlock()
		m.log.Error("timeline entries lost", "instance", name, "lost", len(entries), "lost_total", total, "err", err)
		return
	}
	m.reportedLost(entries[0].InstanceID, lost)
}

// withLost returns entries preceded, if entries of the instance were lost,
// by the entry that says how many, and that number.
func (m *Manager) withLost(id int64, at time.Time, boot int64, entries []*record.TimelineEntry) ([]*record.TimelineEntry, int) {
	m.lostMu.Lock()
	lost := m.lost[id]
	m.lostMu.Unlock()
	if lost == 0 {
		return entries, 0
	}
	note := &record.TimelineEntry{
		InstanceID: id, Time: at, Boot: boot, Kind: kindTimeline, Cause: "store",
		Detail: fmt.Sprintf("timeline incomplete: %d entries lost", lost),
	}
	return append([]*record.TimelineEntry{note}, entries...), lost
}

// reportedLost records that n lost entries of an instance are now reported
// in its timeline.
func (m *Manager) reportedLost(id int64, n int) {
	if n == 0 {
		return
	}
	m.lostMu.Lock()
	defer m.lostMu.Unlock()
	if m.lost[id] -= n; m.lost[id] <= 0 {
		delete(m.lost, id)
	}
}

// LostTimelineEntries returns how many timeline entries of an instance
// could not be written and are not yet reported in its timeline.
func (m *Manager) LostTimelineEntries(ctx context.Context, name string) (int, error) {
	e, err := m.lookup(ctx, name)
	if err != nil {
		return 0, err
	}
	m.mu.RLock()
	id := e.rec.ID
	m.mu.RUnlock()
	m.lostMu.Lock()
	defer m.lostMu.Unlock()
	return m.lost[id], nil
}

// eventLost records in an instance's timeline that one of its events could
// not be published (the event log refused it even after retries), so that
// the instance says what its event history is missing.
func (m *Manager) eventLost(ctx context.Context, ev events.Event, cause error) {
	if ev.Instance == "" {
		return
	}
	m.mu.RLock()
	e, ok := m.byName[ev.Instance]
	var id int64
	var boot int64
	if ok {
		id, boot = e.rec.ID, e.rec.Boot
	}
	m.mu.RUnlock()
	if !ok {
		return // deleted meanwhile: nothing to record it in
	}
	what := ev.Type
	var lc events.Lifecycle
	if json.Unmarshal(ev.Metadata, &lc) == nil && lc.Action != "" {
		what = lc.Action
	}
	m.appendTimeline(ctx, ev.Instance, &record.TimelineEntry{
		InstanceID: id, Time: time.Now().UTC(), Boot: boot, Kind: kindTimeline, Cause: "store",
		Detail: fmt.Sprintf("event %s lost: %v", what, cause),
	})
}
