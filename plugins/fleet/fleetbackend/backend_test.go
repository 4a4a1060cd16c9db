package fleetbackend

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func newTestBackend(t *testing.T) *Backend {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleetbt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		os.RemoveAll(dir)
	})
	return b
}

// waitEvent returns the first event of kind for uuid.
func waitEvent(t *testing.T, events <-chan sdk.Event, uuid string, kind sdk.EventKind) sdk.Event {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-events:
			if ev.UUID == uuid && ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event for %s within a minute", kind, uuid)
		}
	}
}

// TestGuestEnds: how a guest ends is what its state and exit event say.
func TestGuestEnds(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]string
		stop   *sdk.StopOptions // nil: the guest ends by itself
		want   string
	}{
		{"crash_after", map[string]string{KeyCrashAfter: "100ms", KeyJitter: "0"}, nil, ExitCrashed},
		{"graceful stop", nil, &sdk.StopOptions{Timeout: 30 * time.Second}, ExitClean},
		{"force stop", nil, &sdk.StopOptions{Force: true}, ExitKilled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			events, err := b.Events(ctx)
			if err != nil {
				t.Fatal(err)
			}
			spec := &sdk.GuestSpec{Name: "g", UUID: "0d5e1c8a-3f4b-4a6e-9c2d-7b8a9f0e1d2c", Config: tt.config}
			h, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, st, err := b.Start(ctx, h, spec); err != nil || st.Status != sdk.StatusRunning {
				t.Fatalf("Start = %+v, %v", st, err)
			}
			if tt.stop != nil {
				if _, err := b.Stop(ctx, h, *tt.stop); err != nil {
					t.Fatal(err)
				}
			}
			ev := waitEvent(t, events, spec.UUID, sdk.EventExited)
			if ev.Detail != tt.want {
				t.Fatalf("exit event detail %q, want %q", ev.Detail, tt.want)
			}
			st, err := b.State(ctx, h)
			if err != nil || st.Status != sdk.StatusStopped || st.Details[DetailExitStatus] != tt.want {
				t.Fatalf("State = %+v, %v; want stopped with %q", st, err, tt.want)
			}
		})
	}
}

// TestRing: what the guest writes on its port lands in its ring (QEMU
// semantics: the oldest bytes are overwritten) and raises a ring-data
// event.
func TestRing(t *testing.T) {
	b := newTestBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events, err := b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &sdk.GuestSpec{Name: "ring", UUID: "5b0c2e7d-1a9f-4c3b-8e6d-2f1a0b9c8d7e"}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Start(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	g, err := b.lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	port, err := os.OpenFile(filepath.Join(portsDir(g.h.Dir), ringproto.PortCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := port.WriteString("STARTED\nCONNECTED\n"); err != nil {
		t.Fatal(err)
	}
	port.Close()
	// 18 bytes into a 16-byte ring: the first two are gone. With an
	// Events stream open the bytes go with the event (sdk.CapRingPush),
	// the first drain of the guest numbered 1, and ReadRing finds none.
	ev := waitEvent(t, events, spec.UUID, sdk.EventRingData)
	if string(ev.Ring) != "ARTED\nCONNECTED\n" || ev.RingSeq != 1 {
		t.Fatalf("ring-data event carries %q (seq %d); want the last 16 bytes, seq 1", ev.Ring, ev.RingSeq)
	}
	got, err := b.ReadRing(ctx, h, 64)
	if err != nil || len(got) != 0 {
		t.Fatalf("ReadRing with a stream open = %q, %v; want nothing", got, err)
	}
	// Without a stream, ReadRing reads the ring.
	cancel()
	testwait.For(t, "the stream to close", time.Minute, func() bool { return b.pushing.Load() == 0 })
	port, err = os.OpenFile(filepath.Join(portsDir(g.h.Dir), ringproto.PortCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := port.WriteString("STOPPED\n"); err != nil {
		t.Fatal(err)
	}
	port.Close()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testwait.For(t, "the word in the ring", time.Minute, func() bool { return g.ring.Len() == 8 })
	got, err = b.ReadRing(ctx, h, 64)
	if err != nil || string(got) != "STOPPED\n" {
		t.Fatalf("ReadRing without a stream = %q, %v; want STOPPED", got, err)
	}
	if _, err := b.Stop(ctx, h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}
