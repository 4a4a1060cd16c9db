package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// BenchmarkInstance measures one GET /1.0/instances/{name} round trip over
// the Unix socket, envelope decoding included.
func BenchmarkInstance(b *testing.B) {
	srv := apitest.NewServer(b, apitest.Options{})
	c, err := client.New(srv.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Create(ctx, api.InstancesPost{Name: "bench", Backend: "sim", Start: true}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, err := c.Instance(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkEvents measures event delivery from Publish on the bus to the
// client's channel through the websocket.
func BenchmarkEvents(b *testing.B) {
	srv := apitest.NewServer(b, apitest.Options{BusBuffer: 1 << 16})
	c, err := client.New(srv.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evc, errc := c.Events(ctx, client.EventFilter{})
	ev := events.NewLifecycle(events.InstanceUpdated, "bench", nil, nil)
	b.ResetTimer()
	start := time.Now()
	go func() {
		for range b.N {
			if _, err := srv.Bus.Publish(ctx, ev); err != nil {
				return
			}
		}
	}()
	for i := 0; i < b.N; i++ {
		select {
		case _, ok := <-evc:
			if !ok {
				b.Fatalf("stream ended: %v", <-errc)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("got %d of %d events", i, b.N)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	cancel()
	for range evc {
	}
}
