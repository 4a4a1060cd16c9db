package sdk

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// Events go to the daemon in batches (EventBatches): an event that finds
// the stream quiet (no batch sent for EventBatchLinger) goes at once, so a
// lone guest's event is not delayed; while the stream is busy the events
// are gathered until EventBatchLinger after the last batch, at most
// EventBatchMax at once. With 10,000 guests heartbeating every 5 s that is
// about 100 stream messages a second instead of 2,000.
//
// Heartbeats (Event.Heartbeat: ring bytes that only repeat the agent's
// last word) are held longer: a batch of heartbeats alone waits until
// EventHeartbeatLinger after its first one (or EventBatchMax events) before
// it goes, and any other event sends it at once with the held heartbeats
// before it, so a state change is never delayed nor reordered behind them.
// An idle host's heartbeats then cost the daemon about one stream message
// a second, however many guests it runs.
const (
	EventBatchLinger     = 10 * time.Millisecond
	EventHeartbeatLinger = time.Second
	EventBatchMax        = 512
)

// noEventBatches is set once a plugin answered EventBatches with
// Unimplemented (built with an SDK before it): events come through Events.
type noEventBatches struct{ atomic.Bool }

// subscribe asks the backend for its events and sends the stream's headers,
// which tell the client the subscription exists. The returned stop drains
// what the backend still sends once the stream ended, so a backend that
// does not watch ctx closely never blocks on its channel.
func (s *grpcServer) subscribe(stream grpc.ServerStream) (ch <-chan Event, stop func(), err error) {
	ch, err = s.impl.Events(stream.Context())
	if err != nil {
		return nil, nil, toStatus(err)
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return nil, nil, err
	}
	return ch, func() {
		go func() {
			for range ch { //nolint:revive // draining
			}
		}()
	}, nil
}

// EventBatches serves the backend's events in batches (see
// EventBatchLinger).
func (s *grpcServer) EventBatches(_ *backendv1.EventsRequest, stream grpc.ServerStreamingServer[backendv1.EventBatch]) error {
	ctx := stream.Context()
	ch, stop, err := s.subscribe(stream)
	if err != nil {
		return err
	}
	defer stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var last time.Time // when the last batch went
	for {
		var batch backendv1.EventBatch
		heartbeats := true // the batch holds heartbeats only
		add := func(ev Event) {
			batch.Events = append(batch.Events, eventToProto(ev))
			heartbeats = heartbeats && ev.Heartbeat
		}
		select {
		case <-ctx.Done():
			return toStatus(ctx.Err())
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			add(ev)
		}
		first := time.Now()
		closed := false
		// gather adds events until the linger timer fires, the batch is
		// full, or (heartbeats only) an event that is not a heartbeat came.
		gather := func(wait time.Duration, untilNotHeartbeat bool) error {
			linger.Reset(wait)
			defer linger.Stop()
			for len(batch.Events) < EventBatchMax && (!untilNotHeartbeat || heartbeats) {
				select {
				case <-ctx.Done():
					return toStatus(ctx.Err())
				case ev, ok := <-ch:
					if !ok {
						closed = true
						return nil
					}
					add(ev)
				case <-linger.C:
					return nil
				}
			}
			return nil
		}
		if wait := EventBatchLinger - time.Since(last); !last.IsZero() && wait > 0 {
			if err := gather(wait, false); err != nil {
				return err
			}
		}
		if wait := EventHeartbeatLinger - time.Since(first); heartbeats && !closed && wait > 0 {
			if err := gather(wait, true); err != nil {
				return err
			}
		}
		// Whatever else is queued goes along.
	queued:
		for !closed && len(batch.Events) < EventBatchMax {
			select {
			case ev, ok := <-ch:
				if !ok {
					closed = true
					break queued
				}
				add(ev)
			default:
				break queued
			}
		}
		if err := stream.Send(&batch); err != nil {
			return err
		}
		if closed {
			return nil
		}
		last = time.Now()
	}
}

// eventBatches opens the plugin's batched event stream; ok is false when
// the plugin has none (Unimplemented), and the caller opens Events.
func (g *grpcClient) eventBatches(ctx context.Context) (_ <-chan Event, ok bool, _ error) {
	stream, err := g.c.EventBatches(ctx, &backendv1.EventsRequest{})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return nil, false, nil
		}
		return nil, true, fromStatus(ctx, err)
	}
	// Wait for the headers: the plugin sends them once it subscribed, so no
	// event after Events returned is lost. A stream that ends without
	// headers carries the plugin's error.
	md, err := stream.Header()
	if err == nil && md == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return nil, false, nil
		}
		return nil, true, fromStatus(ctx, err)
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		for {
			b, err := stream.Recv()
			if err != nil {
				return
			}
			for _, p := range b.GetEvents() {
				select {
				case ch <- eventFromProto(p):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, true, nil
}
