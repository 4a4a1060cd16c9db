package instance

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// changeWriter is the optional part of a store that writes one change of
// an instance in one call: the instance's new record (nil: unchanged), its
// timeline entries and the events that announce it, in one transaction
// (db's SQL store has it). An entry whose InstanceID is 0 is given in.ID;
// on success each event has its id, on failure nothing was written.
type changeWriter interface {
	WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error
}

// changeFromWriter is the optional part of a store that writes a change of
// an instance record as what changed since prev, the record as the caller
// last read it from the store or wrote it: only the changed columns (for a
// Ready declaration the config), in one transaction with the timeline
// entries and events as changeWriter's WriteChange (evs may be empty). A
// row that no longer holds prev is written whole; prev is only read (db's
// SQL store has it).
type changeFromWriter interface {
	WriteChangeFrom(ctx context.Context, prev, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error
}

// stage stages a change's events on the bus for the change's own write
// (changeWriter: the state change, its timeline and its events in one
// transaction, so a Ready declaration is one write waiting for one commit).
// It returns nil when there are no events, the store has no ChangeWriter or
// the bus refuses (closed): the events are then published after the write,
// as before.
func (m *Manager) stage(evs []events.Event) (*events.Staged, changeWriter) {
	if len(evs) == 0 || m.bus == nil {
		return nil, nil
	}
	cw, ok := m.store.(changeWriter)
	if !ok {
		return nil, nil
	}
	st, err := m.bus.Stage(evs)
	if err != nil {
		return nil, nil
	}
	return st, cw
}

// recordNotPersisted writes the timeline entries and events of a change
// that saved no instance record (an agent state change, a repeated Ready),
// after the change was made in memory: in one write when the store can,
// else as appendTimeline and publish do. A failure loses the entries (they
// are counted, as appendTimeline counts them) and the events (recorded as
// lost, as publish records them); the change stays made.
func (m *Manager) recordNotPersisted(ctx context.Context, c *change) {
	if len(c.timeline) == 0 {
		m.publish(ctx, c.events)
		return
	}
	st, cw := m.stage(c.events)
	if st == nil {
		m.appendTimeline(ctx, c.rec.Name, c.timeline...)
		m.publish(ctx, c.events)
		return
	}
	first := c.timeline[0]
	write, lost := m.withLost(first.InstanceID, first.Time, first.Boot, c.timeline)
	err := m.retryWrite(ctx, fmt.Sprintf("recording a change of instance %q", c.rec.Name), func(ctx context.Context) error {
		return storeErr(cw.WriteChange(ctx, nil, write, st.Records()))
	})
	if err != nil {
		st.Abort()
		m.lostMu.Lock()
		m.lost[first.InstanceID] += len(c.timeline)
		m.lostMu.Unlock()
		m.log.Error("timeline entries and events lost", "instance", c.rec.Name, "entries", len(c.timeline), "events", len(c.events), "err", err)
		for _, ev := range c.events {
			m.eventLost(ctx, ev, err)
		}
		return
	}
	m.reportedLost(first.InstanceID, lost)
	st.Deliver()
}
