package sdk

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// evBackend is a backend whose events come from ch (nothing else is used).
type evBackend struct {
	Backend
	ch chan Event
}

func (b *evBackend) Events(context.Context) (<-chan Event, error) { return b.ch, nil }

// oldServer is a plugin built before EventBatches.
type oldServer struct{ *grpcServer }

func (oldServer) EventBatches(*backendv1.EventsRequest, grpc.ServerStreamingServer[backendv1.EventBatch]) error {
	return status.Error(codes.Unimplemented, "method EventBatches not implemented")
}

func serveBackend(t *testing.T, srv backendv1.BackendServer) backendv1.BackendClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	backendv1.RegisterBackendServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return backendv1.NewBackendClient(conn)
}

// TestEventBatches: a burst of events crosses in a few messages, in order;
// an event on a quiet stream goes at once (not after a linger).
func TestEventBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be := &evBackend{ch: make(chan Event, 4096)}
	c := serveBackend(t, &grpcServer{impl: be})
	stream, err := c.EventBatches(ctx, &backendv1.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	// A lone event on a quiet stream.
	be.ch <- Event{UUID: "first", Kind: EventRingData}
	b, err := stream.Recv()
	if err != nil || len(b.GetEvents()) != 1 || b.GetEvents()[0].GetUuid() != "first" {
		t.Fatalf("first batch %v, %v", b, err)
	}
	// A burst right after it: gathered.
	const n = 2000
	for i := range n {
		be.ch <- Event{UUID: string(rune('a' + i%26)), Kind: EventRingData, Detail: time.Duration(i).String()}
	}
	got, msgs := 0, 0
	for got < n {
		b, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		if len(b.GetEvents()) > EventBatchMax {
			t.Fatalf("a batch of %d events, at most %d", len(b.GetEvents()), EventBatchMax)
		}
		for _, ev := range b.GetEvents() {
			if want := time.Duration(got).String(); ev.GetDetail() != want {
				t.Fatalf("event %d has detail %q: out of order", got, ev.GetDetail())
			}
			got++
		}
	}
	if msgs > n/10 {
		t.Errorf("%d events in %d messages: not batched", n, msgs)
	}
	t.Logf("%d events in %d messages", n, msgs)
	// Quiet again: the next lone event goes at once, well before a
	// second has passed (a generous bound for a loaded machine).
	time.Sleep(3 * EventBatchLinger)
	start := time.Now()
	be.ch <- Event{UUID: "late", Kind: EventReset}
	if b, err := stream.Recv(); err != nil || len(b.GetEvents()) != 1 || b.GetEvents()[0].GetUuid() != "late" {
		t.Fatalf("late batch %v, %v", b, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a lone event took %v", d)
	}
	// The backend ends its channel: the stream ends after the last batch.
	be.ch <- Event{UUID: "last", Kind: EventExited}
	close(be.ch)
	var last []string
	for {
		b, err := stream.Recv()
		if err != nil {
			break
		}
		for _, ev := range b.GetEvents() {
			last = append(last, ev.GetUuid())
		}
	}
	if len(last) != 1 || last[0] != "last" {
		t.Errorf("events before the end %v, want [last]", last)
	}
}

// TestEventsFallback: the daemon's client reads a plugin without
// EventBatches (an older SDK) through Events, and a current one through
// EventBatches; both deliver every event in order.
func TestEventsFallback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		old     bool
		batched bool
	}{{"current plugin", false, true}, {"plugin without EventBatches", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			be := &evBackend{ch: make(chan Event, 256)}
			var srv backendv1.BackendServer = &grpcServer{impl: be}
			if tc.old {
				srv = oldServer{&grpcServer{impl: be}}
			}
			g := NewGRPCBackend(serveBackend(t, srv)).(*grpcClient)
			t.Cleanup(func() { close(be.ch) }) // as a backend does when its ctx ends
			evs, err := g.Events(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if g.noEvBatch.Load() == tc.batched {
				t.Errorf("batched stream used: %v, want %v", !g.noEvBatch.Load(), tc.batched)
			}
			for i := range 100 {
				be.ch <- Event{UUID: "u", Kind: EventRingData, Port: time.Duration(i).String()}
			}
			for i := range 100 {
				ev := <-evs
				if want := time.Duration(i).String(); ev.UUID != "u" || ev.Kind != EventRingData || ev.Port != want {
					t.Fatalf("event %d = %+v, want port %s", i, ev, want)
				}
			}
		})
	}
}
