package db

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Defaults of WithRetention.
const (
	DefaultTimelineRetention = 1000   // newest timeline entries kept per instance
	DefaultEventRetention    = 100000 // newest events kept
)

// pruneTimeout bounds one prune transaction.
const pruneTimeout = time.Minute

// retention is how much history the Store keeps. Anything a guest can make
// the daemon record (a Ready declaration is an event and a timeline entry)
// must not grow the database without bound.
type retention struct {
	timeline int // per instance
	events   int
}

// slack is how many appends past a limit wait before a prune, so pruning
// costs one DELETE per limit/10 appends rather than one per append.
func slack(limit int) int { return max(limit/10, 1) }

// account notes the appends of a committed call.
func (w *writer) account(op *writeOp) {
	if op.events {
		w.newEvents++
	}
	for _, id := range op.timeline {
		w.newTimeline[id]++
	}
}

// prune deletes, in a transaction of its own after a batch committed, the
// events beyond the newest keep.events and the timeline entries of each
// instance beyond its newest keep.timeline, once enough appends came since
// the last prune. The tables then hold at most limit+slack(limit) rows per
// instance (timeline) or in all (events). A failure is logged and retried
// after the next batch.
func (w *writer) prune() {
	var instances []int64
	for id, n := range w.newTimeline {
		if n >= slack(w.keep.timeline) {
			instances = append(instances, id)
		}
	}
	events := w.newEvents >= slack(w.keep.events)
	if !events && len(instances) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if events {
			// The id of the keep.events-th newest event; none (NULL, nothing
			// deleted) when there are fewer.
			err := tx.Exec(`DELETE FROM "events" WHERE "id" < (SELECT "id" FROM "events" ORDER BY "id" DESC LIMIT 1 OFFSET ?)`,
				w.keep.events-1).Error
			if err != nil {
				return fmt.Errorf("pruning events: %w", err)
			}
		}
		for _, id := range instances {
			// Newest as ListTimeline orders them: by time, then id.
			err := tx.Exec(`DELETE FROM "timeline_entries" WHERE "instance_id" = ? AND "id" NOT IN `+
				`(SELECT "id" FROM "timeline_entries" WHERE "instance_id" = ? ORDER BY "time" DESC, "id" DESC LIMIT ?)`,
				id, id, w.keep.timeline).Error
			if err != nil {
				return fmt.Errorf("pruning timeline of instance %d: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		if w.log != nil {
			w.log.Warn("pruning history failed", "err", err)
		}
		return
	}
	if events {
		w.newEvents = 0
	}
	for _, id := range instances {
		delete(w.newTimeline, id)
	}
}
