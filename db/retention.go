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
	// DefaultInstanceEventFloor is the newest events of each instance that
	// the global DefaultEventRetention never deletes: whatever the other
	// guests do, every instance keeps at least its last 100 events.
	DefaultInstanceEventFloor = 100
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
	floor          int // per existing instance, out of the global limit's reach
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

// pruneEventsSQL is the global event prune, one statement: it deletes the
// events older than the keep.events-th newest (the cut; its first argument,
// an offset) except the newest keep.floor of each instance that exists (its
// second argument, an offset). It walks indexes only, never the rows the
// floors keep:
//
//   - names: the distinct instance names of the log, by a loose scan of the
//     (instance, id) index of events (migration 202611230001), one seek per
//     name ("" is the daemon's own events);
//   - cut: the id at the offset, walking the primary key from the newest;
//   - floors: per name with an event below the cut (one seek), the id of
//     its keep.floor-th newest event (one seek and a walk of keep.floor
//     entries of the same index; 0, keep all, when it has fewer), or the cut
//     for a name no instance has (a deleted instance, the daemon), which has
//     no floor;
//   - the events deleted: per name, the range of the (instance, id) index
//     below both its floor and the cut.
//
// MATERIALIZED makes both engines compute cut and floors once; CROSS JOIN
// keeps SQLite's planner from walking the primary key below the cut (every
// row the floors keep) instead (PostgreSQL: pruneEventsPostgres). The cost
// is about (instances x keep.floor) index entries, never the rows kept:
// BenchmarkPruneEventsFloor10k (docs/store.md).
const pruneEventsSQL = pruneEventsFloors +
	`DELETE FROM "events" WHERE "id" IN (SELECT "e"."id" FROM "floors" CROSS JOIN "events" AS "e" ` +
	`WHERE "e"."instance" = "floors"."name" AND "e"."id" < "floors"."id" AND "e"."id" < (SELECT "id" FROM "cut"))`

// pruneEventsPostgres is pruneEventsSQL for PostgreSQL, whose planner
// flattens the CROSS JOIN into a hash join over every event below the cut:
// a LATERAL subquery fenced by OFFSET 0 keeps the range scan per name.
const pruneEventsPostgres = pruneEventsFloors +
	`DELETE FROM "events" WHERE "id" IN (SELECT "d"."id" FROM "floors" CROSS JOIN LATERAL ` +
	`(SELECT "e"."id" FROM "events" AS "e" WHERE "e"."instance" = "floors"."name" ` +
	`AND "e"."id" < "floors"."id" AND "e"."id" < (SELECT "id" FROM "cut") OFFSET 0) AS "d")`

// pruneEventsFloors is the WITH clause of both prune statements: names,
// cut and floors.
const pruneEventsFloors = `WITH RECURSIVE "names"("name") AS (` +
	`SELECT (SELECT "instance" FROM "events" ORDER BY "instance" LIMIT 1) ` +
	`UNION ALL SELECT (SELECT "instance" FROM "events" WHERE "instance" > "names"."name" ORDER BY "instance" LIMIT 1) ` +
	`FROM "names" WHERE "names"."name" IS NOT NULL), ` +
	`"cut"("id") AS MATERIALIZED (SELECT "id" FROM "events" ORDER BY "id" DESC LIMIT 1 OFFSET ?), ` +
	`"floors"("name", "id") AS MATERIALIZED (SELECT "names"."name", ` +
	`CASE WHEN EXISTS (SELECT 1 FROM "instances" WHERE "instances"."name" = "names"."name") ` +
	`THEN COALESCE((SELECT "e"."id" FROM "events" AS "e" WHERE "e"."instance" = "names"."name" ORDER BY "e"."id" DESC LIMIT 1 OFFSET ?), 0) ` +
	`ELSE (SELECT "id" FROM "cut") END ` +
	`FROM "names" WHERE "names"."name" IS NOT NULL AND EXISTS (SELECT 1 FROM "events" AS "b" ` +
	`WHERE "b"."instance" = "names"."name" AND "b"."id" < (SELECT "id" FROM "cut"))) `

// eventFloor is the floor of each instance's events, at most its own limit.
func (k retention) eventFloor() int { return max(min(k.floor, k.instanceEvents), 1) }

// prune deletes, in a transaction of its own after a batch committed, the
// events beyond the newest keep.events (but never the newest keep.floor of
// an existing instance), the events of each instance beyond
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
			stmt := pruneEventsSQL
			if w.engine == EnginePostgres {
				stmt = pruneEventsPostgres
			}
			err := tx.Exec(stmt, w.keep.events-1, w.keep.eventFloor()-1).Error
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

// WithInstanceEventFloor sets how many of the newest events of each
// existing instance the global limit of WithRetention never deletes
// (default DefaultInstanceEventFloor), so that however many events the other
// instances make, each keeps its recent history. The events table then
// holds at most the global limit plus this floor per instance (plus the
// slack before a prune). It is at most the per-instance limit of
// WithInstanceEventRetention; zero or less keeps the default. Events of
// deleted instances and of the daemon itself have no floor.
func WithInstanceEventFloor(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.keep.floor = n
		}
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
