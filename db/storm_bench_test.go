package db

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
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
// "checkpoint=commit" is SQLite's own checkpoint, inside the commit that
// passes 1,000 pages (the store before the checkpointer);
// "checkpoint=background" is the checkpointer's. "lists=1" runs one
// goroutine listing the 10,000 instances without pause during each storm
// (the admin API's list, the dashboard), a reader whose snapshots keep the
// WAL from restarting while they last.
func BenchmarkDeclarationStorm(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"checkpoint=commit/batch=256", []Option{withAutoCheckpoint(), WithMaxBatch(256)}},
		{"checkpoint=background/batch=256", []Option{WithMaxBatch(256)}},
		{"checkpoint=background/batch=1024", []Option{WithMaxBatch(1024)}},
	} {
		for _, lists := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/lists=%d", bc.name, lists), func(b *testing.B) { benchmarkStorm(b, 10000, lists, bc.opts...) })
		}
	}
}

func benchmarkStorm(b *testing.B, n, lists int, opts ...Option) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "storm.db")
	var st *sqlStore
	cp := &commitPathCheckpoints{path: path, ckpt: func() *checkpointer { return st.ckpt }}
	var (
		mu      sync.Mutex
		waits   []time.Duration
		batches []int
	)
	trace := cp.trace(b)
	opts = append(opts, withTrace(func(batch []*writeOp, committed bool) {
		trace(batch, committed)
		if committed {
			return
		}
		t := time.Now()
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
	waits, batches = waits[:0], batches[:0]
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
		for _, in := range insts {
			wg.Go(func() {
				<-start
				if _, err := declare(ctx, st, in, ready); err != nil {
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
