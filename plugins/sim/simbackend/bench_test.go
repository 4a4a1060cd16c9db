package simbackend

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// BenchmarkStartStop measures a full guest boot and forced power-off: VMM
// launch, stand-in root, guest command start, quit, VMM exit.
func BenchmarkStartStop(b *testing.B) {
	be, err := New(testOptionsB(b))
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	spec := newSpec("bench", map[string]string{KeyCommand: "exec sleep 1000"})
	ctx := b.Context()
	h, err := be.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := be.Start(ctx, h, spec); err != nil {
			b.Fatal(err)
		}
		if _, err := be.Stop(ctx, h, sdk.StopOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/start+stop")
}

// BenchmarkReadRing measures one ReadRing round trip to a running VMM.
func BenchmarkReadRing(b *testing.B) {
	be, h := runningGuest(b)
	ctx := b.Context()
	for b.Loop() {
		if _, err := be.ReadRing(ctx, h, 16); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/read")
}

// BenchmarkRingEvent measures the time from a write to the guest's port to
// the RING_DATA event on the backend's event stream.
func BenchmarkRingEvent(b *testing.B) {
	be, h := runningGuest(b)
	hd, _ := decodeHandle(h)
	events, err := be.Events(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	port, err := os.OpenFile(hd.paths().Port(simvm.PortCurrent), os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer port.Close()
	line := []byte("STARTED\n")
	for b.Loop() {
		if _, err := port.Write(line); err != nil {
			b.Fatal(err)
		}
	wait:
		for {
			select {
			case ev := <-events:
				if ev.Kind == sdk.EventRingData {
					break wait
				}
			case <-time.After(waitLong):
				b.Fatal("no RING_DATA event")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/event")
}

func runningGuest(b *testing.B) (*Backend, sdk.Handle) {
	b.Helper()
	be, err := New(testOptionsB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	spec := newSpec("bench", map[string]string{KeyCommand: "exec sleep 1000"})
	h, err := be.Create(b.Context(), spec)
	if err != nil {
		b.Fatal(err)
	}
	h, _, err = be.Start(b.Context(), h, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Stop(context.Background(), h, sdk.StopOptions{Force: true}) })
	return be, h
}

func testOptionsB(b *testing.B) Options {
	dir, err := os.MkdirTemp("", "simb")
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return Options{DataDir: dir, Executable: exe, Agent: "/nonexistent"}
}
