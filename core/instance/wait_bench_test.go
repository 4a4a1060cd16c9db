package instance

import (
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
)

// BenchmarkWait10k measures 10,000 concurrent waits for Ready on one
// instance: the memory each waiter holds while it waits (its goroutine,
// which stands for the API request's own, plus its registration), and the
// time one Ready takes to answer all of them (CPU per waiter). Run with
// -benchtime=Nx; each iteration is one round of 10,000 waiters.
func BenchmarkWait10k(b *testing.B) {
	const n = 10000
	e := newEnv(b)
	inst := e.create("web1", nil)
	var bytesPerWaiter, wakeNS float64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if err := e.m.Start(bg, "web1", adminCaller); err != nil {
			b.Fatal(err)
		}
		goruntime.GC()
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				r, err := e.m.Wait(bg, "web1", WaitReady, time.Hour)
				if err != nil || r.Outcome != OutcomeMet {
					b.Errorf("wait: %v %v", r, err)
				}
			})
		}
		for {
			e.m.mu.RLock()
			got := len(e.m.byName["web1"].waiters)
			e.m.mu.RUnlock()
			if got == n {
				break
			}
			time.Sleep(time.Millisecond) // the waiters' goroutines give no signal of their own
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		bytesPerWaiter += float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse) / n
		b.StartTimer()
		start := time.Now()
		if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		wakeNS += float64(time.Since(start).Nanoseconds()) / n
		b.StopTimer()
		if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(bytesPerWaiter/float64(b.N), "B/waiter")
	b.ReportMetric(wakeNS/float64(b.N), "ns-wake/waiter")
	b.ReportMetric(0, "ns/op")
}
