package web

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guestlink/guestlink/core/events"
)

// defaultFeedBuffer is how many live events a stream may have waiting before the
// hub drops it (the page then reconnects and resumes from its last id). A
// stream writes what is queued in one flush, so it falls this far behind
// only when its client does not read or reads slower than a storm arrives
// (10,000 guests declaring Ready within a second): each drop costs the
// daemon a replay from the store, so the queue holds a few seconds of a
// storm (events are small and their fragments shared: 2,048 cost a stream
// at most ~300 KB while it is behind).
const defaultFeedBuffer = 2048

// hub shares one live bus subscription among every open stream, so an open
// page costs a small queue instead of a bus subscription of its own. A
// stream that resumes from an older id replays the stored events with a
// short-lived subscription of its own, then switches to its feed.
type hub struct {
	ev  Events
	log *slog.Logger

	mu     sync.Mutex
	sub    *events.Subscription // nil until a stream needs it, and after it ends
	ran    chan struct{}        // closed when the goroutine reading sub returns
	last   int64                // the newest event id the feeds are complete after
	feeds  map[*feed]struct{}
	closed bool
	// dropped counts the feeds dropped for falling behind (StreamStats).
	dropped uint64
	// feedBuffer is each feed's queue (defaultFeedBuffer; tests set less
	// before the first stream opens).
	feedBuffer int
}

// feed is one stream's queue of the live lifecycle events its page shows
// (scope); ch is closed when the hub drops the stream (it fell behind, or
// the hub stopped).
type feed struct {
	ch    chan events.Event
	scope *streamScope
	// skipped is the id of the newest event the hub passed over because
	// the page shows nothing of it: read before finding ch empty, it is a
	// position the stream has caught up with (its heartbeat carries it,
	// so that a reconnect resumes from there, not from its last update).
	skipped atomic.Int64
}

func newHub(ev Events, log *slog.Logger) *hub {
	return &hub{ev: ev, log: log, feeds: make(map[*feed]struct{}), feedBuffer: defaultFeedBuffer}
}

// join registers a new feed for a page showing scope. Every lifecycle
// event with an id greater than the returned id that scope wants arrives
// on the feed; older ones are in the event log.
func (h *hub) join(scope *streamScope) (*feed, int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, 0, fmt.Errorf("joining the live stream: %w", events.ErrClosed)
	}
	if h.sub == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last, err := h.ev.LastID(ctx)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("starting the live stream: %w", err)
		}
		// Resuming after the newest stored id leaves no gap between the
		// log and the live events.
		// The hub never waits for a stream, but it shares its subscription
		// with every open page: it may fall behind a storm by more than
		// one stream's queue before the bus drops it (and every page).
		sub, err := h.ev.Subscribe(events.Filter{Types: []string{events.TypeLifecycle}, After: last, Buffer: 4 * h.feedBuffer})
		if err != nil {
			return nil, 0, fmt.Errorf("starting the live stream: %w", err)
		}
		h.sub, h.last, h.ran = sub, last, make(chan struct{})
		go h.run(sub, h.ran)
	}
	f := &feed{ch: make(chan events.Event, h.feedBuffer), scope: scope}
	h.feeds[f] = struct{}{}
	return f, h.last, nil
}

// leave unregisters f.
func (h *hub) leave(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.feeds, f)
}

// run fans the subscription's events out to the feeds whose pages show
// something of them, never waiting for one: a full feed is dropped.
func (h *hub) run(sub *events.Subscription, ran chan struct{}) {
	defer close(ran)
	for ev := range sub.C() {
		id, name, action := eventHead(ev)
		h.mu.Lock()
		h.last = ev.ID
		for f := range h.feeds {
			if !f.scope.wants(id, name, action) {
				f.skipped.Store(ev.ID)
				continue
			}
			select {
			case f.ch <- ev:
			default:
				delete(h.feeds, f)
				close(f.ch)
				h.dropped++
			}
		}
		h.mu.Unlock()
	}
	// The subscription ended (it fell behind, or the bus closed): end
	// every stream; the pages resume from their last ids on a new one.
	if err := sub.Err(); err != nil {
		h.log.Warn("dashboard: live event subscription ended", "err", err)
	}
	h.mu.Lock()
	for f := range h.feeds {
		delete(h.feeds, f)
		close(f.ch)
	}
	if h.sub == sub {
		h.sub = nil
	}
	h.mu.Unlock()
}

// close stops the hub and ends every feed.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	sub, ran := h.sub, h.ran
	h.mu.Unlock()
	if sub != nil {
		_ = sub.Close()
		<-ran
	}
}
