package db

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// BenchmarkDeclarationStorm measures the group-commit writer in a storm of
// Ready declarations: each op is 10,000 goroutines, one per instance, that
// each make at once the write a Ready declaration makes (one WriteChange:
// the instance row, its timeline entry and its instance-ready event, one
// call of the writer, one transaction shared with the calls batched with
// it). It reports the process's CPU per declaration, the calls' wait in the
// writer's queue (from the call to the start of its batch), the batches,
// and the checkpoints made on the commit path (batches during which the
// database file was written while no background checkpoint ran).
//
// "update=narrow" declares as core/instance does now, through
// WriteChangeFrom from the record last written (only the config and
// updated_at, by the prepared UPDATE); the others through WriteChange (the
// whole row, by gorm), as before.
//
// "checkpoint=commit" is SQLite's own checkpoint, inside the commit that
// passes 1,000 pages (the store before the checkpointer);
// "checkpoint=background" is the checkpointer's. "lists=1" runs one
// goroutine listing the 10,000 instances without pause during each storm
// (the admin API's list, the dashboard), a reader whose snapshots keep the
// WAL from restarting while they last.
func BenchmarkDeclarationStorm(b *testing.B) {
	for _, bc := range []struct {
		name   string
		narrow bool
		opts   []Option
	}{
		{"checkpoint=commit/batch=256", false, []Option{withAutoCheckpoint(), WithMaxBatch(256)}},
		{"checkpoint=background/batch=256", false, []Option{WithMaxBatch(256)}},
		{"checkpoint=background/batch=1024", false, []Option{WithMaxBatch(1024)}},
		{"checkpoint=background/batch=1024/update=narrow", true, []Option{WithMaxBatch(1024)}},
		// No PASSIVE: the gap copies the whole WAL every 8,000 pages.
		{"checkpoint=gap-only/batch=256", false, []Option{WithMaxBatch(256), withWALPages(1<<30, walBound)}},
	} {
		for _, lists := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/lists=%d", bc.name, lists), func(b *testing.B) { benchmarkStorm(b, 10000, lists, bc.narrow, bc.opts...) })
		}
	}
}

// declareFrom is declare as core/instance makes it: a copy of prev (the
// record last written) with the ready key, written by WriteChangeFrom. It
// returns the new record.
func declareFrom(ctx context.Context, s *sqlStore, prev *record.Instance, ready string) (*record.Instance, error) {
	next := *prev
	next.Config = maps.Clone(prev.Config)
	next.Config["volatile.last_state.ready"] = ready
	ev := &events.Record{Type: "lifecycle", Instance: next.Name,
		Body: []byte(`{"type":"lifecycle","metadata":{"action":"instance-ready","source":"/1.0/instances/` + next.Name + `"}}`)}
	err := s.WriteChangeFrom(ctx, prev, &next, []*record.TimelineEntry{{Boot: next.Boot, Kind: "ready", From: "", To: ready, Cause: "agent"}}, []*events.Record{ev})
	return &next, err
}

func benchmarkStorm(b *testing.B, n, lists int, narrow bool, opts ...Option) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "storm.db")
	var st *sqlStore
	cp := &commitPathCheckpoints{path: path, ckpt: func() *checkpointer { return st.ckpt }}
	var (
		mu      sync.Mutex
		waits   []time.Duration
		batches []int
		// The writer's time in transactions, and in those that carried a
		// checkpoint (commit mode).
		busy, ckptBusy time.Duration
		batchStart     time.Time
	)
	trace := cp.trace(b)
	opts = append(opts, withTrace(func(batch []*writeOp, committed bool) {
		seen := cp.seen.Load()
		trace(batch, committed)
		t := time.Now()
		if committed {
			mu.Lock()
			busy += t.Sub(batchStart)
			if cp.seen.Load() != seen {
				ckptBusy += t.Sub(batchStart)
			}
			mu.Unlock()
			return
		}
		batchStart = t
		mu.Lock()
		for _, op := range batch {
			waits = append(waits, t.Sub(op.queued))
		}
		batches = append(batches, len(batch))
		mu.Unlock()
	}))
	s, err := Open(ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	st = s.(*sqlStore)
	defer st.Close()
	insts := createInstances(b, st, "i", n)
	var ck0 checkpointStats
	if st.ckpt != nil {
		ck0 = st.ckpt.snapshot()
	}
	mu.Lock()
	waits, batches, busy, ckptBusy = waits[:0], batches[:0], 0, 0
	mu.Unlock()
	seen0 := cp.seen.Load()

	var cpu time.Duration
	listed := 0
	b.ResetTimer()
	for i := range b.N {
		ready := fmt.Sprint(i%2 == 0)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, n+lists)
		stop := make(chan struct{})
		var listers sync.WaitGroup
		var lmu sync.Mutex
		for range lists {
			listers.Go(func() {
				<-start
				for k := 0; ; k++ {
					select {
					case <-stop:
						lmu.Lock()
						listed += k
						lmu.Unlock()
						return
					default:
					}
					if _, err := st.ListInstances(ctx, InstanceFilter{}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for k, in := range insts {
			wg.Go(func() {
				<-start
				var err error
				if narrow {
					insts[k], err = declareFrom(ctx, st, in, ready)
				} else {
					_, err = declare(ctx, st, in, ready)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		cpu0 := processCPU()
		close(start)
		wg.Wait()
		close(stop)
		listers.Wait()
		cpu += processCPU() - cpu0
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	calls := b.N * n
	slices.Sort(waits)
	q := func(p float64) float64 {
		return float64(waits[min(len(waits)-1, int(p*float64(len(waits))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(calls), "cpu-µs/decl")
	b.ReportMetric(q(0.5), "wait-p50-ms")
	b.ReportMetric(q(0.99), "wait-p99-ms")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "wait-max-ms")
	b.ReportMetric(float64(len(batches))/float64(b.N), "batches/storm")
	b.ReportMetric(float64(calls)/float64(len(batches)), "calls/batch")
	b.ReportMetric(float64(cp.seen.Load()-seen0)/float64(b.N), "commit-ckpts/storm")
	b.ReportMetric(float64(busy.Microseconds())/1000/float64(b.N), "writer-ms/storm")
	b.ReportMetric(float64(ckptBusy.Microseconds())/1000/float64(b.N), "ckpt-batch-ms/storm")
	if lists > 0 {
		b.ReportMetric(float64(listed)/float64(b.N), "lists/storm")
	}
	if st.ckpt != nil {
		ck := st.ckpt.snapshot()
		b.ReportMetric(float64(ck.Passive-ck0.Passive)/float64(b.N), "passive/storm")
		b.ReportMetric(float64(ck.Gaps-ck0.Gaps)/float64(b.N), "gaps/storm")
		b.ReportMetric(float64((ck.GapWait-ck0.GapWait).Microseconds())/1000/float64(b.N), "gap-ms/storm")
	}
}

// processCPU returns the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeclarationFloor is the floor for BenchmarkDeclarationStorm: the
// same statements for 10,000 declarations (each instance's row, timeline
// entry and event) run by one writer call in one transaction, with no
// queue, no goroutine per call and one commit. Its CPU per declaration is
// what the SQL work costs. "update=full" writes the whole row through gorm
// (WriteChange's statement); "update=narrow" the config and updated_at by
// the prepared narrow UPDATE (WriteChangeFrom's).
func BenchmarkDeclarationFloor(b *testing.B) {
	for _, narrow := range []bool{false, true} {
		b.Run(map[bool]string{false: "update=full", true: "update=narrow"}[narrow], func(b *testing.B) { benchmarkFloor(b, narrow) })
	}
}

func benchmarkFloor(b *testing.B, narrow bool) {
	const n = 10000
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "floor.db"))
	if err != nil {
		b.Fatal(err)
	}
	st := s.(*sqlStore)
	defer st.Close()
	insts := createInstances(b, st, "i", n)
	var cpu time.Duration
	b.ResetTimer()
	for i := range b.N {
		ready := fmt.Sprint(i%2 == 0)
		cpu0 := processCPU()
		err := st.w.do(ctx, true, func(tx *gorm.DB) error {
			for k, in := range insts {
				if narrow {
					next := *in
					next.Config = maps.Clone(in.Config)
					next.Config["volatile.last_state.ready"] = ready
					u, err := narrowOf(in, &next, nil)
					if err != nil {
						return err
					}
					if done, err := st.narrowUpdateTx(tx, nil, u); err != nil || !done {
						return fmt.Errorf("narrow update of %s: %v (applied %v)", in.Name, err, done)
					}
					next.UpdatedAt = u.updated
					insts[k] = &next
				} else {
					in.Config["volatile.last_state.ready"] = ready
					if err := st.updateInstance(tx, nil, instanceRowOf(in)); err != nil {
						return err
					}
				}
				entries := []*record.TimelineEntry{{InstanceID: in.ID, Time: now(), Boot: in.Boot, Kind: "ready", To: ready, Cause: "agent"}}
				if err := st.prep.insertEntries(tx, entries); err != nil {
					return err
				}
				ev := &events.Record{Type: "lifecycle", Instance: in.Name, Time: now(),
					Body: []byte(`{"type":"lifecycle","metadata":{"action":"instance-ready","source":"/1.0/instances/` + in.Name + `"}}`)}
				if err := st.prep.insertEvent(tx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		cpu += processCPU() - cpu0
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/decl")
}
