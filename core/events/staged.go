package events

import (
	"fmt"
	"slices"
)

// Staged is events whose rows the caller writes in a transaction of its own
// (the store's ChangeWriter: a state change and its events committed together, one
// write instead of two). Stage takes their place in the delivery order, so
// that no event with a larger id is delivered before them; exactly one of
// Deliver (written) or Abort (not written) must follow, and soon: until
// then later events wait.
type Staged struct {
	b      *Bus
	ticket uint64
	evs    []Event
	recs   []*Record
	done   bool
}

// Stage prepares evs for the caller's write: Records are the rows to insert.
// It fails for an event without a type or the closed bus (ErrClosed).
func (b *Bus) Stage(evs []Event) (*Staged, error) {
	s := &Staged{b: b, evs: slices.Clone(evs), recs: make([]*Record, len(evs))}
	for i := range s.evs {
		rec, err := b.record(&s.evs[i])
		if err != nil {
			return nil, err
		}
		s.recs[i] = rec
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("staging events: %w", ErrClosed)
	}
	s.ticket = b.nextTicket
	b.nextTicket++
	return s, nil
}

// Records returns the rows to write, in the events' order; the write sets
// their ids.
func (s *Staged) Records() []*Record { return s.recs }

// Deliver delivers the written events to the subscribers whose filter
// matches (in id order with every other event) and returns them with their
// ids. It must be called once, after the rows were committed.
func (s *Staged) Deliver() []Event {
	for i := range s.evs {
		s.evs[i].ID = s.recs[i].ID
	}
	s.finish(true)
	return s.evs
}

// Abort gives up the events' place: their write failed or was not made.
func (s *Staged) Abort() { s.finish(false) }

func (s *Staged) finish(written bool) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	b.returned[s.ticket] = struct{}{}
	for {
		if _, ok := b.returned[b.lowTicket]; !ok {
			break
		}
		delete(b.returned, b.lowTicket)
		b.lowTicket++
	}
	if written {
		for _, ev := range s.evs {
			p := pendingEvent{ev: ev, watermark: b.nextTicket - 1}
			i, _ := slices.BinarySearchFunc(b.pending, ev.ID, func(p pendingEvent, id int64) int {
				return cmpInt64(p.ev.ID, id)
			})
			b.pending = slices.Insert(b.pending, i, p)
		}
	}
	b.flushLocked()
}
