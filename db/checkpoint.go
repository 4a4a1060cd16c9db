package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// SQLite's WAL checkpoints, off the writer's commit path.
//
// By default SQLite checkpoints inside the commit that takes the WAL past
// wal_autocheckpoint pages (1,000): the group-commit writer then copies the
// WAL into the database file (and fsyncs it) before it can start the next
// batch, while every queued call waits. In a storm of 10,000 Ready
// declarations a goroutine dump caught the writer there with 7,645 calls
// queued. So every connection of ours runs with wal_autocheckpoint=0 (a DSN
// pragma, applied by the driver to each new connection of every pool), and
// a checkpointer goroutine with a connection of its own does the work.
//
// Why it is safe, by how SQLite's WAL works (SQLite's documentation of WAL
// mode, "Checkpointing" and "Avoiding Excessively Large WAL Files", and of
// sqlite3_wal_checkpoint_v2):
//   - A PASSIVE checkpoint takes no lock a writer or a reader needs: it
//     copies the frames no reader's snapshot still needs (every read mark
//     bounds it) into the database file, and never waits. So it runs beside
//     the writer's transactions and the readers' queries; it may copy less
//     than the whole WAL, never a page a reader could still need from the
//     WAL.
//   - The WAL file restarts (the writer writes from its start again) only
//     when a write transaction begins while every frame was copied and no
//     reader holds a snapshot inside the WAL. A writer that commits without
//     pause appends frames during each PASSIVE run, so PASSIVE alone never
//     lets the WAL restart under a continuous load: the WAL would grow
//     without bound. So when a commit leaves the WAL past walBound pages,
//     the writer's goroutine takes a gap before its next batch: it runs a
//     RESTART checkpoint on the checkpointer's connection (after a PASSIVE
//     under way), which copies the frames left since the last PASSIVE and
//     waits, for at most checkpointBusy, for readers to leave the WAL; the
//     writer's next transaction then restarts the WAL. That is the only
//     time the writer waits for a checkpoint (back-pressure from a WAL the
//     PASSIVE checkpoints could not keep small), and it waits for the tail,
//     not the whole WAL.
//   - A reader holding an old snapshot for longer than checkpointBusy keeps
//     the WAL from restarting (the RESTART gives up, busy, and the writer
//     goes on): the WAL then grows, and the next gap comes a bound further
//     on, until one finds the readers gone. Our readers are single queries;
//     the longest (a list of 10,000 instances) takes tens of milliseconds.
//   - Durability is unchanged: a commit is durable once its frames are in
//     the WAL and fsynced (synchronous=FULL); a checkpoint only moves
//     committed pages, and SQLite fsyncs the WAL before and the database
//     after copying.
//   - journal_size_limit makes the commit that restarts the WAL truncate the
//     file to half of walPassiveAt pages (walSizeLimit), so past that the
//     file's size is what the current WAL holds (the checkpointer reads it
//     with a stat, no SQL), and the disk it takes stays bounded after a
//     burst.
//   - At Close, the last connection closed checkpoints the whole WAL and
//     removes the file, as SQLite does with any setting of
//     wal_autocheckpoint.

// Checkpoint thresholds, in pages of the database.
const (
	// walPassiveAt is the WAL size past which a commit wakes a PASSIVE
	// checkpoint: SQLite's default wal_autocheckpoint.
	walPassiveAt = 1000
	// walBound is the WAL size past which the checkpointer takes a gap
	// between two batches (see above).
	walBound = 8 * walPassiveAt
	// checkpointBusy bounds how long a gap's RESTART waits for readers to
	// leave the WAL (the checkpointer connection's busy_timeout).
	checkpointBusy = 100 * time.Millisecond
)

// walSizeLimit is the journal_size_limit of a store that checkpoints past
// passive pages (or takes gaps past them, if fewer): half of it (for
// SQLite's default page size), so a WAL file truncated to it is below the
// threshold.
func walSizeLimit(passive int) int64 { return walBytes(passive/2, 4096) }

// walBytes returns the size in bytes of a WAL of frames pages of pageSize
// bytes: a 32-byte header, then a 24-byte header and the page per frame.
func walBytes(frames, pageSize int) int64 { return 32 + int64(frames)*int64(24+pageSize) }

// checkpointStats counts what the checkpointer did (for tests and
// benchmarks).
type checkpointStats struct {
	Passive   int64         // PASSIVE checkpoints run
	Gaps      int64         // RESTART checkpoints between two batches
	Restarted int64         // gaps whose RESTART found no reader in the WAL
	GapWait   time.Duration // total time the gaps held the writer
	MaxGap    time.Duration // the longest gap
	Errors    int64         // checkpoints that failed (logged)
}

// checkpointer runs the store's SQLite checkpoints on its own connection:
// PASSIVE ones on its own goroutine, woken by the writer's commits, and the
// gaps on the writer's goroutine (afterCommit).
type checkpointer struct {
	db       *sql.DB // one connection, used only for checkpoints
	walPath  string
	pageSize int
	passive  int   // frames not yet copied that wake a PASSIVE checkpoint
	bound    int64 // WAL bytes that take a gap
	log      *slog.Logger
	kick     chan struct{} // a commit happened (capacity 1: kicks coalesce)
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once

	// copied is how many of the WAL's first frames the last checkpoint
	// copied or found (0 after a gap: the next write restarts the WAL), so
	// the frames past it in the file are new since. A WAL
	// restarted since is written from its start again: the commit that
	// restarts it truncates the file to walSizeLimit, below the copied
	// frames (or the file was not truncated, and the frames of the new WAL
	// are then understated by at most the limit, half the PASSIVE
	// threshold).
	copied atomic.Int64

	// gapAt is the WAL size (bytes) of the next gap: bound, or, after a gap
	// that readers kept from restarting the WAL, a bound further on (so a
	// reader that never leaves costs the writer one gap per bound of WAL,
	// not one per batch). Used only by the writer's goroutine.
	gapAt int64

	// runs counts checkpoints started and ended (odd while one runs), so a
	// benchmark can tell a database file change made by a checkpoint from
	// one made on the commit path.
	runs atomic.Int64

	mu    sync.Mutex
	stats checkpointStats
}

// newCheckpointer starts the checkpointer of the WAL at walPath on db (a
// pool of one connection with wal_autocheckpoint=0 and a busy_timeout of
// checkpointBusy), for pages of pageSize bytes, with thresholds in pages.
func newCheckpointer(db *sql.DB, walPath string, pageSize, passive, bound int, log *slog.Logger) *checkpointer {
	c := &checkpointer{
		db:       db,
		walPath:  walPath,
		pageSize: pageSize,
		passive:  passive,
		bound:    walBytes(bound, pageSize),
		gapAt:    walBytes(bound, pageSize),
		log:      log,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go c.loop()
	return c
}

// afterCommit is called by the writer's goroutine after each batch, between
// two transactions. It reads the WAL's size (one stat): past the bound it
// runs the gap there and then; otherwise it wakes the PASSIVE goroutine and
// returns at once.
func (c *checkpointer) afterCommit() {
	size, err := c.walSize()
	if err != nil {
		c.failed("reading the WAL's size", err)
		return
	}
	if size < c.bound {
		c.gapAt = c.bound
	}
	if size >= c.gapAt {
		if restarted := c.gap(); !restarted {
			c.gapAt = size + c.bound
		}
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// close stops the goroutine (a checkpoint under way finishes first). It
// does not close the connection.
func (c *checkpointer) close() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.stopped
}

// snapshot returns the counters so far.
func (c *checkpointer) snapshot() checkpointStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *checkpointer) loop() {
	defer close(c.stopped)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		size, err := c.walSize()
		if err != nil {
			c.failed("reading the WAL's size", err)
			continue
		}
		copied := c.copied.Load()
		if size < walBytes(int(copied), c.pageSize) {
			copied = 0
		}
		var frames int64
		if size > walBytes(0, c.pageSize) {
			frames = (size - walBytes(0, c.pageSize)) / int64(24+c.pageSize)
		}
		if frames-copied >= int64(c.passive) {
			// The next PASSIVE comes passive frames further on, even if
			// a reader's snapshot kept this one from copying them all.
			c.checkpoint("PASSIVE")
			c.copied.Store(frames)
		}
	}
}

// walSize returns the WAL file's size (0 if it does not exist).
func (c *checkpointer) walSize() (int64, error) {
	fi, err := os.Stat(c.walPath)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// gap runs a RESTART checkpoint on the writer's goroutine, between two of
// its batches; it first waits for a PASSIVE under way (the connection is
// the checkpointer's only one). It reports whether the next write restarts
// the WAL.
func (c *checkpointer) gap() (restarted bool) {
	start := time.Now()
	copied, restarted := c.checkpoint("RESTART")
	if restarted {
		copied = 0
	}
	c.copied.Store(int64(copied))
	busy := !restarted
	d := time.Since(start)
	c.mu.Lock()
	c.stats.Gaps++
	if !busy {
		c.stats.Restarted++
	}
	c.stats.GapWait += d
	c.stats.MaxGap = max(c.stats.MaxGap, d)
	c.mu.Unlock()
	if c.log != nil && d > time.Second {
		c.log.Warn("WAL checkpoint held the store's writer", "elapsed", d, "restarted", !busy)
	}
	return !busy
}

// checkpoint runs one checkpoint of mode and returns how many of the WAL's
// first frames are copied (SQLite's count) and, for a RESTART, whether it
// copied them all and found no reader left in the WAL: then the next write
// restarts the WAL. (A PASSIVE that copied every frame it saw may have run
// beside commits that appended more: the WAL goes on.)
func (c *checkpointer) checkpoint(mode string) (copied int, restarted bool) {
	c.runs.Add(1)
	defer c.runs.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	var busy, logFrames, done int
	err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logFrames, &done)
	if err != nil {
		c.failed("running a "+mode+" checkpoint", err)
		return 0, false // try again on the next commit
	}
	if mode == "PASSIVE" {
		c.mu.Lock()
		c.stats.Passive++
		c.mu.Unlock()
	}
	return max(done, 0), mode == "RESTART" && busy == 0 && done == logFrames
}

func (c *checkpointer) failed(what string, err error) {
	c.mu.Lock()
	c.stats.Errors++
	c.mu.Unlock()
	if c.log != nil {
		c.log.Warn("WAL checkpoint failed", "err", fmt.Errorf("%s: %w", what, err))
	}
}
