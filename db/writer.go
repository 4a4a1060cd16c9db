package db

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"
)

// writeOp is one queued write call: fn runs inside the batch's transaction
// and must be safe to run again (after a failed batch it runs alone).
type writeOp struct {
	ctx      context.Context
	events   bool    // appends events: takes the event lock on PostgreSQL
	timeline []int64 // the instance of each timeline entry it appends
	fn       func(tx *gorm.DB) error
	done     chan error
	queued   time.Time // when it was called, if the writer traces (tests)
}

// writer is the group-commit writer: every write of a Store goes through
// its single goroutine, which takes all calls queued while the previous
// transaction committed and commits them together in one transaction. One
// fsync then acknowledges many calls, which is what makes durable SQLite
// writes fast, and the single writer gives events their ids in commit order.
//
// If the batch's transaction fails, it is rolled back and each call runs
// again in a transaction of its own, so a bad call fails only its caller.
//
// A call's context decides only whether it starts: one that ended while
// queued is not run. Once in a transaction, its statements run under the
// batch's own deadline (batchTimeout), not the call's: a caller whose
// deadline passes while the batch commits (its caller waits for the truth
// anyway) must not abort the transaction of every call batched with it.
// When it did, a storm of 10,000 Ready declarations (5 s per attempt) made
// batch after batch fail near their callers' deadlines and fall back to one
// transaction per call, whose slowness expired more deadlines: the store
// never caught up and 8,857 declarations were refused.
type writer struct {
	db       *gorm.DB
	engine   string
	maxBatch int
	log      *slog.Logger

	mu     sync.RWMutex // held shared while enqueueing, exclusively to close
	closed bool
	ops    chan *writeOp
	// quit is closed when close begins: a call still waiting to be queued
	// or queued but not yet in a transaction fails with ErrClosed instead
	// of being committed (see close).
	quit     chan struct{}
	quitOnce sync.Once
	stopped  chan struct{}

	// ckpt, for SQLite, checkpoints the WAL off the commit path; the
	// writer tells it of each commit (checkpoint.go). nil for PostgreSQL.
	ckpt  *checkpointer
	trace func(batch []*writeOp, commit bool) // tests' (options.trace)

	keep retention
	// Appends committed since the last prune; used only by the goroutine.
	newEvents   int
	newTimeline map[int64]int // by instance id
	// newInstanceEvents counts events by instance name (noteEvent).
	newInstanceEvents map[string]int
}

func newWriter(db *gorm.DB, engine string, maxBatch int, keep retention, log *slog.Logger, ckpt *checkpointer, trace func([]*writeOp, bool)) *writer {
	w := &writer{
		db:          db,
		engine:      engine,
		maxBatch:    maxBatch,
		log:         log,
		ckpt:        ckpt,
		trace:       trace,
		ops:         make(chan *writeOp, maxBatch),
		quit:        make(chan struct{}),
		stopped:     make(chan struct{}),
		keep:        keep,
		newTimeline: map[int64]int{},
	}
	go w.loop()
	return w
}

// do queues fn and returns once the transaction holding it committed (nil)
// or failed. A call whose ctx ends before its batch starts is not run, nor
// one the store's close finds waiting (ErrClosed).
func (w *writer) do(ctx context.Context, events bool, fn func(tx *gorm.DB) error) error {
	return w.doAppend(ctx, events, nil, fn)
}

// doAppend is do for a call that appends timeline entries, one for each
// instance id in timeline (repeated per entry), so the writer can prune.
func (w *writer) doAppend(ctx context.Context, events bool, timeline []int64, fn func(tx *gorm.DB) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &writeOp{ctx: ctx, events: events, timeline: timeline, fn: fn, done: make(chan error, 1)}
	if w.trace != nil {
		op.queued = time.Now()
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.ops <- op:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	case <-w.quit:
		w.mu.RUnlock()
		return ErrClosed
	}
	w.mu.RUnlock()
	// Once queued, wait for the truth even if ctx ends: returning early
	// could report a failure for a change that then commits.
	return <-op.done
}

// close stops accepting calls, lets the transaction in flight finish (what
// it commits stays committed) and stops the goroutine. Every call that had
// not started fails with ErrClosed: those waiting to be queued (their
// callers blocked on a full queue) and those queued but not yet in a
// transaction. A stop in a storm of 10,000 Ready declarations otherwise
// committed the whole backlog one batch after the other before the store
// closed, and waited for every blocked caller to get its call queued. It
// is safe to call more than once.
func (w *writer) close() {
	w.quitOnce.Do(func() { close(w.quit) })
	// Callers blocked on a full queue leave it (quit), so the lock comes
	// at once.
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.ops)
	}
	w.mu.Unlock()
	<-w.stopped
}

// quitting reports whether close has begun.
func (w *writer) quitting() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

func (w *writer) loop() {
	defer close(w.stopped)
	batch := make([]*writeOp, 0, w.maxBatch)
	for op := range w.ops {
		batch = append(batch[:0], op)
	fill:
		for len(batch) < w.maxBatch {
			select {
			case op, ok := <-w.ops:
				if !ok {
					break fill
				}
				batch = append(batch, op)
			default:
				break fill
			}
		}
		w.commitBatch(batch)
		clear(batch)
	}
}

// commitBatch commits batch and then tells the checkpointer.
func (w *writer) commitBatch(batch []*writeOp) {
	if w.ckpt != nil {
		defer w.ckpt.afterCommit()
	}
	if w.trace != nil {
		w.trace(batch, false)
		defer w.trace(batch, true)
	}
	w.commit(batch)
}

// commit runs batch in one transaction, falling back to one transaction per
// call if that fails.
func (w *writer) commit(batch []*writeOp) {
	live := make([]*writeOp, 0, len(batch))
	quitting := w.quitting()
	for _, op := range batch {
		if quitting {
			op.done <- ErrClosed // not started: the store closes
			continue
		}
		if err := op.ctx.Err(); err != nil {
			op.done <- err
			continue
		}
		live = append(live, op)
	}
	if len(live) == 0 {
		return
	}
	defer func() {
		if !w.quitting() {
			w.prune() // the next daemon prunes what a stop left
		}
	}()
	err := w.run(live)
	if err == nil || len(live) == 1 {
		for _, op := range live {
			if err == nil {
				w.account(op)
			}
			op.done <- err
		}
		return
	}
	if w.log != nil {
		w.log.Debug("group commit failed, retrying calls one by one", "calls", len(live), "err", err)
	}
	for _, op := range live {
		if w.quitting() {
			op.done <- ErrClosed // its batch rolled back; the store closes
			continue
		}
		if err := op.ctx.Err(); err != nil {
			op.done <- err
			continue
		}
		err := w.run([]*writeOp{op})
		if err == nil {
			w.account(op)
		}
		op.done <- err
	}
}

// batchTimeout bounds one transaction of the writer (a batch, or one call
// alone after a failed batch): the statements of a store that stopped
// answering (a PostgreSQL failover) give up after it.
const batchTimeout = 30 * time.Second

// run executes ops in one transaction, under batchTimeout rather than any
// call's context (see writer).
func (w *writer) run(ops []*writeOp) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store write panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	return w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if w.engine == EnginePostgres {
			for _, op := range ops {
				if !op.events {
					continue
				}
				// Serialise event-appending transactions of all daemons
				// sharing the database until commit, so ids become
				// visible in increasing order.
				if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", eventLockKey).Error; err != nil {
					return fmt.Errorf("taking event lock: %w", err)
				}
				break
			}
		}
		notify := false
		for _, op := range ops {
			if err := op.fn(tx); err != nil {
				return err
			}
			notify = notify || op.events
		}
		if notify && w.engine == EnginePostgres {
			// Tell every member sharing the database that event rows were
			// committed (delivered at commit; the payload is empty: a
			// listener reads the rows after the last id it delivered, so
			// nothing depends on NOTIFY's size limit or on a notification
			// arriving at all).
			if err := tx.Exec("SELECT pg_notify(?, '')", EventsChannel).Error; err != nil {
				return fmt.Errorf("notifying event listeners: %w", err)
			}
		}
		return nil
	})
}
