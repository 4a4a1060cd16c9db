package qemuvm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// BenchmarkBootToStarted measures a TCG guest from Start until the agent's
// STARTED is read from the ring buffer, and reports the medians of that and
// of Start itself (QEMU spawned, QMP negotiated, guest resumed). Run briefly:
//
//	go test -run '^$' -bench BootToStarted -benchtime 5x ./plugins/qemuvm/
func BenchmarkBootToStarted(b *testing.B) {
	e := newBootEnv(b, LayoutCurrent, "")
	if !e.img.HasAgent {
		testenv.Requires(b, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	var started, toWord []float64
	for b.Loop() {
		t0 := time.Now()
		e.start(b, false)
		started = append(started, float64(time.Since(t0).Milliseconds()))
		e.waitWord(b, ringproto.Started, 3*time.Minute)
		toWord = append(toWord, float64(time.Since(t0).Milliseconds()))
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(median(started), "ms-start-median")
	b.ReportMetric(median(toWord), "ms-to-STARTED-median")
}

// BenchmarkStatefulStopRestore measures a stateful stop (migrate to a file)
// and the restore of that state.
func BenchmarkStatefulStopRestore(b *testing.B) {
	e := newBootEnv(b, LayoutCurrent, "guestlink.ring=STOPPED")
	e.start(b, false)
	e.waitAny(b, 3*time.Minute)
	var save, restore []float64
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t0 := time.Now()
		if _, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Stateful: true}); err != nil {
			b.Fatal(err)
		}
		save = append(save, float64(time.Since(t0).Milliseconds()))
		cancel()
		t0 = time.Now()
		e.start(b, true)
		restore = append(restore, float64(time.Since(t0).Milliseconds()))
	}
	b.ReportMetric(median(save), "ms-save-median")
	b.ReportMetric(median(restore), "ms-restore-median")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
