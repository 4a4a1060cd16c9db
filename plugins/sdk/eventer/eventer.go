// Package eventer is the one backend event fan-out every guestlink backend
// uses (after Nomad's drivers/shared/eventer): a backend emits sdk.Events
// without ever blocking, and each Events stream the daemon opens gets its
// own bounded queue.
//
// Drop policy, the same for every backend:
//
//   - Emit never blocks and never waits for a consumer.
//   - Wake-up hints coalesce: while an EventRingData, EventPortOpened or
//     EventPortClosed event of a guest is still queued in a stream, further
//     events of the same kind for that guest are dropped from that stream.
//     The daemon treats all three as "read the ring now", so one queued
//     hint carries the news of the dropped ones. A hint is never dropped
//     for lack of room: each stream holds at most three per guest.
//   - Lifecycle events (EventExited, EventReset, EventError) never coalesce.
//     Each stream queues at most Limit of them (DefaultLimit, 4096); when
//     that is reached, a new one is dropped from that stream and counted;
//     the first drop after a successful push is logged as a warning, so a
//     stuck consumer costs one log line per episode.
//
// Memory stays bounded whatever a guest does: at most Limit lifecycle
// events and three hints per guest in each stream.
package eventer

import (
	"context"
	"sync"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// Eventer fans backend events out to every open Events stream. It is safe
// for concurrent use; the zero value is not usable, call New.
type Eventer struct {
	log Logger

	mu      sync.Mutex
	streams map[*stream]struct{}
}

type stream struct {
	q        *Queue[sdk.Event]
	dropping bool // the last push to q was dropped for lack of room (under Eventer.mu)
}

// Logger is where an Eventer warns about drops; hclog.Logger and
// *slog.Logger both satisfy it.
type Logger interface {
	Warn(msg string, args ...any)
}

type nopLogger struct{}

func (nopLogger) Warn(string, ...any) {}

// New returns an Eventer with no streams. Drops are logged to log (nil: not
// logged).
func New(log Logger) *Eventer {
	if log == nil {
		log = nopLogger{}
	}
	return &Eventer{log: log, streams: map[*stream]struct{}{}}
}

// Key returns the coalescing key of ev under the package's drop policy:
// empty for events that never coalesce.
func Key(ev sdk.Event) string {
	switch ev.Kind {
	case sdk.EventRingData, sdk.EventPortOpened, sdk.EventPortClosed:
		return ev.Kind.String() + "/" + ev.UUID
	default:
		return ""
	}
}

// Emit hands ev to every open stream without blocking, following the
// package's drop policy.
func (e *Eventer) Emit(ev sdk.Event) {
	key := Key(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.streams {
		if s.q.Push(ev, key) {
			if key == "" {
				s.dropping = false // room again: a later drop is a new episode
			}
			continue
		}
		if key != "" {
			continue // coalesced with a queued hint: not a loss
		}
		if !s.dropping {
			s.dropping = true
			e.log.Warn("backend event stream full, dropping events", "uuid", ev.UUID, "kind", ev.Kind.String(), "limit", s.q.limit)
		}
	}
}

// Stream opens an Events stream: the returned channel receives every event
// emitted from now on (under the drop policy) until ctx ends, and is
// closed then. It implements sdk.Backend.Events.
func (e *Eventer) Stream(ctx context.Context) (<-chan sdk.Event, error) {
	return e.StreamFill(ctx, nil)
}

// StreamFill is Stream with fill (nil: none) called on each event as it
// leaves the queue, just before it is sent, on the stream's one goroutine
// and so in the stream's order. A backend with sdk.CapRingPush drains the
// guest's ring into a ring-data hint there: a coalesced hint then carries
// every byte written until it was sent.
func (e *Eventer) StreamFill(ctx context.Context, fill func(*sdk.Event)) (<-chan sdk.Event, error) {
	s := &stream{q: NewQueue[sdk.Event]()}
	e.mu.Lock()
	e.streams[s] = struct{}{}
	e.mu.Unlock()
	out := make(chan sdk.Event)
	go func() {
		defer close(out)
		defer func() {
			e.mu.Lock()
			delete(e.streams, s)
			e.mu.Unlock()
			s.q.Close()
		}()
		for {
			ev, ok := s.q.Pop(ctx)
			if !ok {
				return
			}
			if fill != nil {
				fill(&ev)
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Stats reports, for each open stream, how many events are queued and how
// many were dropped (coalesced or over the limit) so far.
func (e *Eventer) Stats() []StreamStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]StreamStats, 0, len(e.streams))
	for s := range e.streams {
		out = append(out, StreamStats{Queued: s.q.Len(), Dropped: s.q.Dropped()})
	}
	return out
}

// StreamStats is what Stats reports for one stream.
type StreamStats struct {
	Queued  int    // events waiting for the consumer
	Dropped uint64 // events dropped so far (coalesced or over the limit)
}
