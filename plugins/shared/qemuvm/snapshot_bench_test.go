package qemuvm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// BenchmarkStatefulSnapshot measures, on a running busybox guest (TCG,
// 256 MiB), a stateful snapshot (guest paused, memory migrated to the
// snapshot's file, guest resumed) and the restore of that snapshot into
// the stopped guest (state linked in, QEMU started, state loaded, guest
// resumed), and reports the state's size. Run briefly:
//
//	go test -run '^$' -bench StatefulSnapshot -benchtime 3x ./plugins/shared/qemuvm/
func BenchmarkStatefulSnapshot(b *testing.B) {
	e := newBootEnv(b, LayoutCurrent, "guestlink.ring=STOPPED")
	e.start(b, false)
	e.waitAny(b, 3*time.Minute)
	sn := sdk.Snapshotter(e.b)
	var snap, restore []float64
	var stateBytes int64
	i := 0
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		name := fmt.Sprintf("bench%d", i)
		i++
		t0 := time.Now()
		info, err := sn.SnapshotCreate(ctx, e.h, name, true)
		if err != nil {
			b.Fatal(err)
		}
		snap = append(snap, float64(time.Since(t0).Milliseconds()))
		stateBytes = info.StateBytes
		b.StopTimer()
		if _, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 = time.Now()
		if err := sn.SnapshotRestore(ctx, e.h, name, sdk.RestoreOptions{Stateful: true}); err != nil {
			b.Fatal(err)
		}
		e.start(b, true)
		restore = append(restore, float64(time.Since(t0).Milliseconds()))
		b.StopTimer()
		if err := sn.SnapshotDelete(ctx, e.h, name); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(median(snap), "ms-snapshot-median")
	b.ReportMetric(median(restore), "ms-restore-median")
	b.ReportMetric(float64(stateBytes)/(1<<20), "MiB-state")
}
