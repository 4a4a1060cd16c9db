package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/sdktest"
)

// TestHarness drives the mock's defaults through the in-process harness:
// a guest's lifecycle, an error kind across the boundary, a function field
// and an event.
func TestHarness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mock := &sdktest.Backend{
		ReadRingFunc: func(context.Context, sdk.Handle, int) ([]byte, error) { return []byte("STARTED\n"), nil },
	}
	be := sdktest.Serve(t, mock)

	info, err := be.Info(ctx)
	if err != nil || info.Name != "mock" {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	spec := &sdk.GuestSpec{Name: "g1", UUID: "u1"}
	h, err := be.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, st, err := be.Start(ctx, h, spec); err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("Start = %+v, %v", st, err)
	}
	if data, err := be.ReadRing(ctx, h, 64); err != nil || string(data) != "STARTED\n" {
		t.Fatalf("ReadRing = %q, %v", data, err)
	}
	if _, err := be.State(ctx, sdk.Handle("nope")); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("State of an unknown handle = %v, want sdk.ErrNotFound", err)
	}

	evs, err := be.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The client's Events returns once the plugin subscribed: Emit reaches it.
	if n := mock.Emit(ctx, sdk.Event{UUID: "u1", Kind: sdk.EventReset}); n != 1 {
		t.Fatalf("Emit reached %d streams, want 1", n)
	}
	if ev := <-evs; ev.UUID != "u1" || ev.Kind != sdk.EventReset {
		t.Fatalf("event %+v", ev)
	}
}

// ExampleBackend shows a mock whose Start fails, as a test of the daemon's
// error handling would set it up.
func ExampleBackend() {
	mock := &sdktest.Backend{
		StartFunc: func(context.Context, sdk.Handle, *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
			return nil, nil, fmt.Errorf("the emulator crashed: %w", sdk.ErrUnavailable)
		},
	}
	_, _, err := mock.Start(context.Background(), nil, &sdk.GuestSpec{})
	fmt.Println(errors.Is(err, sdk.ErrUnavailable))
	// Output: true
}

// TestSpecImageCrossesTheBoundary checks that GuestSpec.Image (disk.v1)
// reaches the plugin as sent, and that a spec without one arrives without.
func TestSpecImageCrossesTheBoundary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *sdk.GuestSpec, 2)
	mock := &sdktest.Backend{CreateFunc: func(_ context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
		got <- spec
		return sdk.Handle(spec.Name), nil
	}}
	be := sdktest.Serve(t, mock)
	img := &sdk.Image{Fingerprint: fmt.Sprintf("%064x", 7), Path: "/s/images/x", Format: "raw", Kernel: "/s/images/x.kernel", Initrd: "/s/images/x.initrd"}
	for _, tc := range []struct {
		name string
		img  *sdk.Image
	}{{"with", img}, {"without", nil}} {
		if _, err := be.Create(ctx, &sdk.GuestSpec{Name: tc.name, UUID: "u", Image: tc.img}); err != nil {
			t.Fatal(err)
		}
		spec := <-got
		switch {
		case tc.img == nil && spec.Image != nil:
			t.Errorf("%s: image %+v appeared", tc.name, spec.Image)
		case tc.img != nil && (spec.Image == nil || *spec.Image != *tc.img):
			t.Errorf("%s: image = %+v, want %+v", tc.name, spec.Image, tc.img)
		}
	}
}

// TestReadRingsBatch: a batch crosses the plugin boundary in one call and
// each read keeps its own outcome, error kinds included.
func TestReadRingsBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls atomic.Int64
	mock := &sdktest.Backend{
		ReadRingFunc: func(_ context.Context, h sdk.Handle, max int) ([]byte, error) {
			calls.Add(1)
			if string(h) == "gone" {
				return nil, fmt.Errorf("guest gone: %w", sdk.ErrNotFound)
			}
			return []byte(string(h) + "-CONNECTED\n")[:min(max, len(h)+11)], nil
		},
	}
	be := sdktest.Serve(t, mock)
	br, ok := be.(sdk.RingBatchReader)
	if !ok {
		t.Fatal("the gRPC client does not read batches")
	}
	reads := []sdk.RingRead{{Handle: sdk.Handle("a"), Max: 64}, {Handle: sdk.Handle("gone"), Max: 64}, {Handle: sdk.Handle("b"), Max: 3}}
	res, err := br.ReadRings(ctx, reads)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || string(res[0].Data) != "a-CONNECTED\n" || res[0].Err != nil ||
		!errors.Is(res[1].Err, sdk.ErrNotFound) || !strings.Contains(res[1].Err.Error(), "guest gone") ||
		string(res[2].Data) != "b-C" {
		t.Fatalf("ReadRings = %+v", res)
	}
	if calls.Load() != 3 {
		t.Fatalf("the plugin read %d rings, want 3", calls.Load())
	}
	// The helper gives the same answers for a backend without batches.
	res = sdk.ReadRings(ctx, mock, reads)
	if string(res[0].Data) != "a-CONNECTED\n" || !errors.Is(res[1].Err, sdk.ErrNotFound) {
		t.Fatalf("sdk.ReadRings without batches = %+v", res)
	}
	if _, err := br.ReadRings(ctx, make([]sdk.RingRead, sdk.MaxRingReads+1)); !errors.Is(err, sdk.ErrInvalid) {
		t.Fatalf("an oversized batch: %v, want sdk.ErrInvalid", err)
	}
}
