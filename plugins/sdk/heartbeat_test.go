package sdk

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// TestRingRepeat checks which drains of a guest's ring count as
// heartbeats: a lone CONNECTED line repeating the previous drain's last
// line, within HeartbeatRepeatWithin; an empty drain. Never STARTED (it
// asks for an advertisement) or STOPPED, never the first CONNECTED, one
// after a silence, or more than one line.
func TestRingRepeat(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type drain struct {
		data string
		at   time.Duration // after t0
		want bool
	}
	tests := []struct {
		name   string
		drains []drain
	}{
		{"connected repeats", []drain{{"CONNECTED\n", 0, false}, {"CONNECTED\n", 5 * time.Second, true}, {"CONNECTED\n", 10 * time.Second, true}}},
		{"started repeats go at once", []drain{{"STARTED\n", 0, false}, {"STARTED\n", 5 * time.Second, false}}},
		{"first connected after started", []drain{{"STARTED\n", 0, false}, {"CONNECTED\n", time.Second, false}, {"CONNECTED\n", 6 * time.Second, true}}},
		{"stopped after heartbeats", []drain{{"CONNECTED\n", 0, false}, {"CONNECTED\n", 5 * time.Second, true}, {"STOPPED\n", 6 * time.Second, false}, {"CONNECTED\n", 7 * time.Second, false}}},
		{"after a silence", []drain{{"CONNECTED\n", 0, false}, {"CONNECTED\n", HeartbeatRepeatWithin, false}, {"CONNECTED\n", HeartbeatRepeatWithin + time.Second, true}}},
		{"two lines", []drain{{"CONNECTED\n", 0, false}, {"CONNECTED\nCONNECTED\n", time.Second, false}, {"CONNECTED\n", 2 * time.Second, true}}},
		{"a line ending in the word", []drain{{"XCONNECTED\n", 0, false}, {"CONNECTED\n", time.Second, false}}},
		{"partial lines", []drain{{"CONNECTED\n", 0, false}, {"CONNEC", time.Second, false}, {"TED\n", 2 * time.Second, false}, {"CONNECTED\n", 3 * time.Second, false}}},
		{"empty drains", []drain{{"", 0, true}, {"CONNECTED\n", time.Second, false}, {"", 2 * time.Second, true}, {"CONNECTED\n", 3 * time.Second, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r RingRepeat
			for i, d := range tt.drains {
				if got := r.Heartbeat([]byte(d.data), t0.Add(d.at)); got != d.want {
					t.Errorf("drain %d %q at +%v: heartbeat %v, want %v", i, d.data, d.at, got, d.want)
				}
			}
		})
	}
}

// batchStream is the server side of an EventBatches stream that records
// the batches sent, with the bubble's time of each.
type batchStream struct {
	grpc.ServerStream
	ctx context.Context

	mu      sync.Mutex
	batches [][]*backendv1.Event
	at      []time.Time
}

func (s *batchStream) Context() context.Context     { return s.ctx }
func (s *batchStream) SendHeader(metadata.MD) error { return nil }
func (s *batchStream) Send(b *backendv1.EventBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, b.GetEvents())
	s.at = append(s.at, time.Now())
	return nil
}

// sent returns the uuids of each batch sent so far and when it went.
func (s *batchStream) sent() ([][]string, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]string, len(s.batches))
	for i, b := range s.batches {
		for _, ev := range b {
			out[i] = append(out[i], ev.GetUuid())
		}
	}
	return out, slices.Clone(s.at)
}

// TestEventBatchesHoldHeartbeats checks the batched stream's heartbeat
// rule: heartbeats alone wait until EventHeartbeatLinger after the first
// (here three, sent 100 ms apart, go as one batch 1 s after the first);
// any other event goes at once and takes the held heartbeats with it,
// before it, in order (a STOPPED after two heartbeats: one batch of three,
// sent when the STOPPED came); a full batch of heartbeats goes without
// waiting; an event without the mark (an older backend's) goes as before.
func TestEventBatchesHoldHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		be := &evBackend{ch: make(chan Event)}
		st := &batchStream{ctx: ctx}
		done := make(chan error, 1)
		go func() { done <- (&grpcServer{impl: be}).EventBatches(&backendv1.EventsRequest{}, st) }()
		hb := func(uuid string) Event {
			return Event{UUID: uuid, Kind: EventRingData, Ring: []byte("CONNECTED\n"), RingSeq: 2, Heartbeat: true}
		}
		want := [][]string{}
		check := func(what string) {
			t.Helper()
			synctest.Wait()
			if got, _ := st.sent(); !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("%s: batches %v, want %v", what, got, want)
			}
		}

		start := time.Now()
		for _, u := range []string{"a", "b", "c"} {
			be.ch <- hb(u)
			time.Sleep(100 * time.Millisecond)
		}
		check("three heartbeats in 300 ms")
		time.Sleep(EventHeartbeatLinger - 300*time.Millisecond)
		want = append(want, []string{"a", "b", "c"})
		check("a heartbeat linger after the first")
		if _, at := st.sent(); at[0].Sub(start) != EventHeartbeatLinger {
			t.Errorf("heartbeats sent %v after the first, want %v", at[0].Sub(start), EventHeartbeatLinger)
		}

		time.Sleep(time.Second)
		be.ch <- hb("d")
		be.ch <- hb("e")
		check("two heartbeats held")
		be.ch <- Event{UUID: "stopped", Kind: EventRingData, Ring: []byte("STOPPED\n"), RingSeq: 3}
		want = append(want, []string{"d", "e", "stopped"})
		check("a state word after heartbeats")

		time.Sleep(time.Second)
		full := make([]string, EventBatchMax)
		for i := range full {
			full[i] = "f"
			be.ch <- hb("f")
		}
		want = append(want, full)
		check("a full batch of heartbeats")

		time.Sleep(time.Second)
		be.ch <- Event{UUID: "old", Kind: EventRingData}
		want = append(want, []string{"old"})
		check("an unmarked event on a quiet stream")

		cancel()
		if err := <-done; err == nil {
			t.Error("the stream ended without the context's error")
		}
		close(be.ch) // as a backend does when the stream's context ends
	})
}

// TestRingEventRoundTrip checks that a pushed ring event keeps its bytes,
// sequence number and heartbeat mark on the wire, and that an event
// without the mark (an older plugin's) arrives unmarked.
func TestRingEventRoundTrip(t *testing.T) {
	for _, ev := range []Event{
		{UUID: "u", Kind: EventRingData, Ring: []byte("CONNECTED\n"), RingSeq: 7, Heartbeat: true},
		{UUID: "u", Kind: EventRingData, Ring: []byte("STOPPED\n"), RingSeq: 8},
	} {
		got := eventFromProto(eventToProto(ev))
		if got.Heartbeat != ev.Heartbeat || got.RingSeq != ev.RingSeq || string(got.Ring) != string(ev.Ring) {
			t.Errorf("%+v came back as %+v", ev, got)
		}
	}
}
