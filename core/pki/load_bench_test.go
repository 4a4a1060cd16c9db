package pki

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLoadInstance measures what a restarted daemon pays to load one
// instance's key pairs (its four files read, both pairs parsed and checked)
// on a store opened anew, as after a restart: cpu-us/op is the loading
// thread's user and system time per instance (getrusage RUSAGE_THREAD).
func BenchmarkLoadInstance(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		if _, err := s.Instance(fmt.Sprintf("g%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	fresh, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &before); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := fresh.LoadInstance(fmt.Sprintf("g%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := syscall.Getrusage(1, &after); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
}
