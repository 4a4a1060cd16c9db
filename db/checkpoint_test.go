package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// withWALPages sets the checkpointer's thresholds in pages (tests).
func withWALPages(passive, bound int) Option {
	return func(o *options) { o.walPassive, o.walBound = passive, bound }
}

// withAutoCheckpoint makes the store checkpoint as it did before the
// checkpointer: SQLite's own, inside the commit that passes 1,000 pages.
func withAutoCheckpoint() Option { return func(o *options) { o.autoCheckpoint = true } }

// withTrace sets the writer's trace (options.trace).
func withTrace(f func(batch []*writeOp, commit bool)) Option {
	return func(o *options) { o.trace = f }
}

// fileStamp is what a write to a file changes.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(t testing.TB, path string) fileStamp {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileStamp{}
	}
	if err != nil {
		t.Error(err)
		return fileStamp{}
	}
	return fileStamp{fi.Size(), fi.ModTime()}
}

// commitPathCheckpoints counts the writer's batches during which the
// database file was written while the checkpointer ran nothing: in WAL mode
// only a checkpoint writes the database file, so each is a checkpoint made
// on the commit path. checked counts the batches it could judge (no
// background checkpoint overlapped them).
type commitPathCheckpoints struct {
	path    string
	ckpt    func() *checkpointer
	before  fileStamp
	runs    int64
	checked atomic.Int64
	seen    atomic.Int64
}

// trace is the writer trace that counts them (run by the writer's goroutine).
func (c *commitPathCheckpoints) trace(t testing.TB) func([]*writeOp, bool) {
	runs := func() int64 {
		if ck := c.ckpt(); ck != nil {
			return ck.runs.Load()
		}
		return 0 // no checkpointer: none runs
	}
	// The counter is read before the first stat and after the second, so
	// an unchanged, even count means no background checkpoint ran between.
	return func(_ []*writeOp, committed bool) {
		if !committed {
			c.runs = runs()
			c.before = stampOf(t, c.path)
			return
		}
		after := stampOf(t, c.path)
		if r := runs(); r != c.runs || r%2 != 0 {
			return // a background checkpoint overlapped the batch
		}
		c.checked.Add(1)
		if after != c.before {
			c.seen.Add(1)
		}
	}
}

// declare writes what a Ready declaration writes (core/instance's mutate
// through WriteChange): the instance record with the ready key, its
// timeline entry and its instance-ready event, one writer call.
func declare(ctx context.Context, s *sqlStore, in *record.Instance, ready string) (*events.Record, error) {
	in.Config["volatile.last_state.ready"] = ready
	ev := &events.Record{Type: "lifecycle", Instance: in.Name,
		Body: []byte(`{"type":"lifecycle","metadata":{"action":"instance-ready","source":"/1.0/instances/` + in.Name + `"}}`)}
	err := s.WriteChange(ctx, in, []*record.TimelineEntry{{Boot: in.Boot, Kind: "ready", From: "", To: ready, Cause: "agent"}}, []*events.Record{ev})
	return ev, err
}

// createInstances creates n running instances named prefix0, prefix1, ...
func createInstances(t testing.TB, s *sqlStore, prefix string, n int) []*record.Instance {
	t.Helper()
	ctx := context.Background()
	out := make([]*record.Instance, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range out {
		out[i] = &record.Instance{Name: fmt.Sprintf("%s%05d", prefix, i), UUID: uuid.NewString(), Backend: "sim", PowerState: "running", Boot: 1,
			Config:  map[string]string{"user.role": "web", "limits.cpu": "2", "limits.memory": "1GiB", "security.devlxd": "true"},
			Devices: map[string]map[string]string{"root": {"type": "disk"}}}
		wg.Go(func() {
			if err := s.CreateInstance(ctx, out[i]); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

// TestWALBoundedUnderLoad writes declarations from 32 goroutines without
// pause (4,800 in all, small checkpoint thresholds: a PASSIVE checkpoint
// past 50 pages, a gap past 400) and checks, after every batch, that the
// WAL file stays under a bound (three times the gap's threshold: what batches add
// while a PASSIVE runs); that each writer reads back, through the reader
// pool, the event and the record it was just told were committed; that the
// writer never checkpointed on its commit path; and that after Close (which
// removes the WAL) a new Store reads every write from the database file.
// The checks can fail: with PASSIVE checkpoints only (no gap) the WAL never
// restarts under this load and passes the bound, and with SQLite's own
// checkpoints the commits write the database file.
func TestWALBoundedUnderLoad(t *testing.T) {
	const passive, bound = 50, 400
	for _, tc := range []struct {
		name         string
		auto         bool
		gapAt        int // pages
		wantOnCommit bool
		wantBounded  bool
	}{
		{"background", false, bound, false, true},
		{"passive-only", false, 1 << 30, false, false},
		{"sqlite-autocheckpoint", true, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "wal.db")
			var st *sqlStore
			cp := &commitPathCheckpoints{path: path, ckpt: func() *checkpointer { return st.ckpt }}
			var maxWAL atomic.Int64
			trace := cp.trace(t)
			opts := []Option{withWALPages(passive, tc.gapAt), withTrace(func(b []*writeOp, committed bool) {
				trace(b, committed)
				if committed {
					maxWAL.Store(max(maxWAL.Load(), stampOf(t, path+"-wal").size))
				}
			})}
			if tc.auto {
				opts = append(opts, withAutoCheckpoint())
			}
			s, err := Open(ctx, path, opts...)
			if err != nil {
				t.Fatal(err)
			}
			st = s.(*sqlStore)
			defer st.Close()
			const goroutines, perG = 32, 150
			insts := createInstances(t, st, "w", goroutines)

			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for _, in := range insts {
				wg.Go(func() {
					for i := range perG {
						want := fmt.Sprint(i)
						ev, err := declare(ctx, st, in, want)
						if err != nil {
							errs <- err
							return
						}
						got, err := st.EventsAfter(ctx, ev.ID-1, 1)
						if err != nil || len(got) != 1 || got[0].ID != ev.ID || got[0].Instance != in.Name {
							errs <- fmt.Errorf("%s: event %d committed, read back %v (%v)", in.Name, ev.ID, got, err)
							return
						}
						rec, err := st.GetInstance(ctx, in.Name)
						if err != nil || rec.Config["volatile.last_state.ready"] != want {
							errs <- fmt.Errorf("%s: write %d committed, read back %v (%v)", in.Name, i, rec, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}

			limit := walBytes(3*bound, 4096)
			t.Logf("%d declarations, WAL at most %d bytes (%d pages); commit-path checkpoints %d of %d batches checked",
				goroutines*perG, maxWAL.Load(), (maxWAL.Load()-32)/(24+4096), cp.seen.Load(), cp.checked.Load())
			if st.ckpt != nil {
				t.Logf("checkpointer: %+v", st.ckpt.snapshot())
			}
			switch {
			case cp.checked.Load() < 10:
				t.Errorf("only %d batches could be checked for commit-path checkpoints", cp.checked.Load())
			case tc.wantOnCommit && cp.seen.Load() == 0:
				t.Errorf("SQLite's autocheckpoint: no commit wrote the database file")
			case !tc.wantOnCommit && cp.seen.Load() != 0:
				t.Errorf("%d commits wrote the database file (checkpointed on the commit path)", cp.seen.Load())
			}
			if got := maxWAL.Load(); tc.wantBounded && got > limit {
				t.Errorf("WAL grew to %d bytes, want at most %d", got, limit)
			} else if !tc.wantBounded && !tc.auto && got <= limit {
				t.Errorf("WAL stayed under %d bytes (%d) with no gap: the load is too light to show the bound", limit, got)
			}
			if tc.wantBounded {
				if s := st.ckpt.snapshot(); s.Restarted == 0 || s.Errors != 0 {
					t.Errorf("checkpointer: %+v, want restarts and no errors", s)
				}
			}

			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after Close the WAL is still there (%v)", err)
			}
			s2, err := Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			evs, err := s2.EventsAfter(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != goroutines*perG {
				t.Errorf("reopened: %d events, want %d", len(evs), goroutines*perG)
			}
			for _, in := range insts {
				rec, err := s2.GetInstance(ctx, in.Name)
				if err != nil || rec.Config["volatile.last_state.ready"] != fmt.Sprint(perG-1) {
					t.Errorf("reopened: %s = %v (%v), want its last write", in.Name, rec, err)
				}
			}
		})
	}
}

// TestCheckpointSettingsOnEveryConnection checks that every connection the
// store opens (all the readers' at once, the writer's, the checkpointer's)
// has wal_autocheckpoint=0 and the WAL size limit: one that checkpointed on
// commit would put the checkpoint back on a commit path.
func TestCheckpointSettingsOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.(*sqlStore)
	rdb, err := st.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	wdb, err := st.wdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, q func(string) (int64, error)) {
		for _, p := range []struct {
			pragma string
			want   int64
		}{{"wal_autocheckpoint", 0}, {"journal_size_limit", walSizeLimit(walPassiveAt)}} {
			got, err := q("PRAGMA " + p.pragma)
			if err != nil || got != p.want {
				t.Errorf("%s: %s = %d (%v), want %d", name, p.pragma, got, err, p.want)
			}
		}
	}
	// Hold every reader connection at once, so each is a different one.
	const readers = 8
	for i := range readers {
		c, err := rdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check(fmt.Sprintf("reader %d", i), func(q string) (n int64, err error) { return n, c.QueryRowContext(ctx, q).Scan(&n) })
	}
	if n := rdb.Stats().OpenConnections; n != readers {
		t.Errorf("reader pool has %d connections open, want %d", n, readers)
	}
	check("writer", func(q string) (n int64, err error) { return n, wdb.QueryRowContext(ctx, q).Scan(&n) })
	check("checkpointer", func(q string) (n int64, err error) { return n, st.ckpt.db.QueryRowContext(ctx, q).Scan(&n) })
}

// TestGapWithReaderHoldingSnapshot holds a read transaction open (a
// snapshot inside the WAL) while one goroutine writes declarations, and
// checks that the WAL cannot restart then (SQLite keeps the frames the
// reader may need) but the writer is not held by a gap at every batch: a
// gap comes once per bound of WAL (60 pages here). Once the reader ends, a
// gap restarts the WAL and the file shrinks below the bound again.
func TestGapWithReaderHoldingSnapshot(t *testing.T) {
	const passive, bound = 15, 60
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(ctx, path, withWALPages(passive, bound))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.(*sqlStore)
	in := createInstances(t, st, "r", 1)[0]
	rdb, err := st.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	reader, err := rdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var n int
	if _, err := reader.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	walPages := func() int64 { return (stampOf(t, path+"-wal").size - 32) / (24 + 4096) }

	// Write until the WAL holds four bounds: each write is a batch of its
	// own (one goroutine).
	writes := 0
	for walPages() < 4*bound {
		if _, err := declare(ctx, st, in, fmt.Sprint(writes)); err != nil {
			t.Fatal(err)
		}
		if writes++; writes > 20000 {
			t.Fatalf("the WAL holds %d pages after %d writes", walPages(), writes)
		}
	}
	held := st.ckpt.snapshot()
	t.Logf("reader holding a snapshot: %d writes, WAL %d pages, %+v", writes, walPages(), held)
	if held.Restarted != 0 {
		t.Errorf("the WAL restarted %d times under a reader's snapshot", held.Restarted)
	}
	if held.Gaps == 0 || held.Gaps > 4 {
		t.Errorf("%d gaps for a WAL of 4 bounds, want 1 to 4 (one a bound, not one a batch)", held.Gaps)
	}

	if _, err := reader.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// The next gap (the WAL is past its threshold) finds no reader.
	for more := 0; st.ckpt.snapshot().Restarted == 0; more++ {
		if more > 20000 {
			t.Fatalf("no restart after the reader ended: %+v", st.ckpt.snapshot())
		}
		if _, err := declare(ctx, st, in, fmt.Sprint(more)); err != nil {
			t.Fatal(err)
		}
	}
	// The commit that restarts the WAL truncates the file.
	if _, err := declare(ctx, st, in, "after"); err != nil {
		t.Fatal(err)
	}
	if p := walPages(); p >= bound {
		t.Errorf("after a restart the WAL file holds %d pages, want under %d", p, bound)
	}
}
