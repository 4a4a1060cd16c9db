package db

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// WriteChange writes one change of an instance in one call: in's new
// record (nil: the instance record is unchanged), its timeline entries and
// the events that announce it, in one transaction of the group-commit
// writer (a declaration is then one write waiting for one commit, not two
// in turn). An entry whose InstanceID is 0 is given in.ID. On success each
// event has its id, in commit order with every other event; on failure
// nothing was written and the ids are 0. core/instance uses it when the
// store has it (its changeWriter interface). It writes every column of the
// record; WriteChangeFrom writes only what changed.
func (s *sqlStore) WriteChange(ctx context.Context, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	return s.WriteChangeFrom(ctx, nil, in, entries, evs)
}

// WriteChangeFrom is WriteChange for a caller that knows the record it
// changed: prev, the instance as the caller last read it from the store or
// wrote it (in.UpdatedAt as the store returned it). Only the columns in
// which in differs from prev are written, and updated_at (narrow.go): for
// a Ready declaration the config alone, by a statement prepared once on
// the writer's connection. If the row no longer holds prev's version
// (updated_at), the whole record is written, as WriteChange does. prev nil,
// or not the same instance as in, is WriteChange. prev is only read.
func (s *sqlStore) WriteChangeFrom(ctx context.Context, prev, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error {
	what := "writing a change"
	var id int64
	if in != nil {
		what = fmt.Sprintf("updating instance %q", in.Name)
		if err := validInstance(in); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if in.ID == 0 {
			return fmt.Errorf("%s: no id: %w", what, ErrInvalid)
		}
		normalize(in)
		id = in.ID
	}
	if err := prepareEntries(entries, id); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, ev := range evs {
		if ev == nil || ev.Type == "" {
			return fmt.Errorf("%s: an event without a type: %w", what, ErrInvalid)
		}
		if err := checkEvent(ev); err != nil {
			return fmt.Errorf("%s: %s event: %w", what, ev.Type, err)
		}
		if ev.Time.IsZero() {
			ev.Time = now()
		}
		ev.Time = ev.Time.UTC()
		if ev.Body == nil {
			ev.Body = []byte{}
		}
	}
	var l *lease
	var row *instanceRow
	var narrow *narrowUpdate
	if in != nil {
		row = instanceRowOf(in)
		var err error
		if l, err = s.heldLease(); err != nil {
			resetEntries(entries)
			return fmt.Errorf("%s: %w", what, err)
		}
		if narrow, err = narrowOf(prev, in, l); err != nil {
			resetEntries(entries)
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	err := s.w.doAppend(ctx, len(evs) > 0, entryInstances(entries), func(tx *gorm.DB) error {
		if narrow != nil {
			done, err := s.narrowUpdateTx(tx, l, narrow)
			if err != nil {
				return err
			}
			if done {
				row.UpdatedAt = narrow.updated
			} else if err := s.updateInstance(tx, l, row); err != nil {
				// The row is not at prev's version: the whole record,
				// as WriteChange writes it.
				return err
			}
		} else if in != nil {
			if err := s.updateInstance(tx, l, row); err != nil {
				return err
			}
		}
		if err := s.prep.insertEntries(tx, entries); err != nil {
			return err
		}
		for _, ev := range evs {
			ev.ID = 0
			s.w.noteEvent(ev.Instance) // per-instance retention (retention.go)
			if err := s.prep.insertEvent(tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		resetEntries(entries)
		for _, ev := range evs {
			ev.ID = 0
		}
		return fmt.Errorf("%s: %w", what, translate(err))
	}
	if in != nil {
		in.UpdatedAt = row.UpdatedAt // set by gorm, or the narrow update's
	}
	return nil
}

// narrowOf returns the narrow update of in from prev (normalized here; in
// is), or nil when there is none to make (no prev, or another instance's).
func narrowOf(prev, in *record.Instance, l *lease) (*narrowUpdate, error) {
	if prev == nil || prev.ID != in.ID {
		return nil, nil
	}
	p := *prev
	normalize(&p)
	u := &narrowUpdate{cols: changedCols(&p, in), updated: nextVersion(p.UpdatedAt)}
	var err error
	if u.args, err = narrowArgs(u.cols, in, u.updated, p.UpdatedAt, l); err != nil {
		return nil, fmt.Errorf("instance %q: %w", in.Name, err)
	}
	return u, nil
}
