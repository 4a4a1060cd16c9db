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
	// DefaultInstanceEventRetention is the newest events kept per instance,
	// besides the global DefaultEventRetention: one noisy guest cannot
	// push the other instances' history out of the log.
	DefaultInstanceEventRetention = 10000
)

// pruneTimeout bounds one prune transaction.
const pruneTimeout = time.Minute

// retention is how much history the Store keeps. Anything a guest can make
// the daemon record (a Ready declaration is an event and a timeline entry)
// must not grow the database without bound.
type retention struct {
	timeline       int // per instance
	events         int
	instanceEvents int // per instance (events whose instance is set)
}

// slack is how many appends past a limit wait before a prune, so pruning
// costs one DELETE per limit/10 appends rather than one per append.
func slack(limit int) int { return max(limit/10, 1) }

// noteEvent notes an event of instance appended by a call being run; it is
// called by the writer's goroutine inside the call. A call run again after
// a failed batch counts twice, which only brings its instance's prune
// forward.
func (w *writer) noteEvent(instance string) {
	if instance == "" {
		return
	}
	if w.newInstanceEvents == nil {
		w.newInstanceEvents = map[string]int{}
	}
	w.newInstanceEvents[instance]++
}

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
// events beyond the newest keep.events, the events of each instance beyond
// its newest keep.instanceEvents and the timeline entries of each instance
// beyond its newest keep.timeline, once enough appends came since the last
// prune. The tables then hold at most limit+slack(limit) rows per instance
// (timeline, events of an instance) or in all (events). Each delete is one
// statement on an index: events by id, events by (instance, id) (migration
// 202611230001), timeline entries by (instance_id, time). A failure is
// logged and retried after the next batch.
func (w *writer) prune() {
	var instances []int64
	for id, n := range w.newTimeline {
		if n >= slack(w.keep.timeline) {
			instances = append(instances, id)
		}
	}
	var noisy []string
	for name, n := range w.newInstanceEvents {
		if n >= slack(w.keep.instanceEvents) {
			noisy = append(noisy, name)
		}
	}
	events := w.newEvents >= slack(w.keep.events)
	if !events && len(instances) == 0 && len(noisy) == 0 {
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
		for _, name := range noisy {
			// The id of the instance's keep.instanceEvents-th newest event.
			err := tx.Exec(`DELETE FROM "events" WHERE "instance" = ? AND "id" < `+
				`(SELECT "id" FROM "events" WHERE "instance" = ? ORDER BY "id" DESC LIMIT 1 OFFSET ?)`,
				name, name, w.keep.instanceEvents-1).Error
			if err != nil {
				return fmt.Errorf("pruning events of instance %q: %w", name, err)
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
	for _, name := range noisy {
		delete(w.newInstanceEvents, name)
	}
	for _, id := range instances {
		delete(w.newTimeline, id)
	}
}

// WithInstanceEventRetention sets how many of the newest events of each
// instance the Store keeps (default DefaultInstanceEventRetention), besides
// the global limit of WithRetention, so that one instance making many
// events cannot evict the others' history. Older events of an instance are
// deleted by the writer in the background, a tenth of the limit past it.
// Zero or less keeps the default.
func WithInstanceEventRetention(perInstance int) Option {
	return func(o *options) {
		if perInstance > 0 {
			o.keep.instanceEvents = perInstance
		}
	}
}
