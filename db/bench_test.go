package db_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// BenchmarkStateChangeWrites measures durable state-change writes from
// many goroutines at once, as the daemon makes them: each operation is one
// UpdateInstanceWithTimeline, AppendTimeline or AppendEvent call (in turn),
// and returns only once committed. "batch=1" turns group commit off for
// comparison.
func BenchmarkStateChangeWrites(b *testing.B) {
	for _, e := range dbtest.Engines() {
		for _, bc := range []struct {
			name string
			opts []db.Option
		}{
			{"group-commit", nil},
			{"batch=1", []db.Option{db.WithMaxBatch(1)}},
		} {
			b.Run(e.Name+"/"+bc.name, func(b *testing.B) {
				benchmarkWrites(b, dbtest.Open(b, e.URL(b), bc.opts...))
			})
		}
	}
}

func benchmarkWrites(b *testing.B, s db.Store) {
	ctx := context.Background()
	const parallelism = 16 // goroutines per GOMAXPROCS
	b.SetParallelism(parallelism)
	var next atomic.Int64
	cpu0 := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		in := newInstance(fmt.Sprintf("bench-%d", g))
		if err := s.CreateInstance(ctx, in); err != nil {
			b.Error(err)
			return
		}
		for i := 0; pb.Next(); i++ {
			var err error
			switch i % 3 {
			case 0:
				in.Boot++
				in.Config["volatile.last_state.power"] = "RUNNING"
				err = s.UpdateInstanceWithTimeline(ctx, in, &record.TimelineEntry{Boot: in.Boot, Kind: "state", From: "stopped", To: "running", Cause: "api"})
			case 1:
				err = s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: in.ID, Boot: in.Boot, Kind: "agent", To: "connected", Cause: "agent"})
			case 2:
				err = s.AppendEvent(ctx, &events.Record{Type: "lifecycle", Instance: in.Name,
					Body: []byte(`{"type":"lifecycle","metadata":{"action":"instance-ready","source":"/1.0/instances/` + in.Name + `"}}`)})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
	// CPU time per write says more than writes/s on a busy machine.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/write")
}

// processCPU returns the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkListInstances10k measures listing 10,000 instances (decoding
// their JSON config and devices).
func BenchmarkListInstances10k(b *testing.B) {
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			ctx := context.Background()
			s := dbtest.Open(b, e.URL(b))
			fill(b, s, 10000)
			cpu0 := processCPU()
			b.ResetTimer()
			for b.Loop() {
				list, err := s.ListInstances(ctx, db.InstanceFilter{})
				if err != nil {
					b.Fatal(err)
				}
				if len(list) != 10000 {
					b.Fatalf("listed %d instances, want 10000", len(list))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// fill creates n instances with a realistic config, from many goroutines
// (which group commit turns into few transactions).
func fill(b *testing.B, s db.Store, n int) {
	b.Helper()
	ctx := context.Background()
	const workers = 64
	var wg sync.WaitGroup
	var failed atomic.Bool
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				in := newInstance(fmt.Sprintf("i%05d", i))
				in.PowerState = "running"
				for k, v := range map[string]string{
					"volatile.last_state.ready": "true", "volatile.uuid": in.UUID, "user.role": "web",
					"limits.cpu": "2", "limits.memory": "1GiB", "security.devlxd": "true",
				} {
					in.Config[k] = v
				}
				if err := s.CreateInstance(ctx, in); err != nil && failed.CompareAndSwap(false, true) {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		b.FailNow()
	}
}
