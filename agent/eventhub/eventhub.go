// Package eventhub fans devlxd events out to the guest's /1.0/events
// subscribers.
package eventhub

import (
	"sync"

	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Buffer is how many events a subscriber may lag behind before it is
// dropped.
const Buffer = 256

// Hub delivers each published event to every subscriber whose filter
// accepts its type. A subscriber that cannot keep up is dropped (its
// channel is closed) rather than slowing the publisher. The zero value is
// ready to use.
type Hub struct {
	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

// Subscription is one subscriber's stream of events.
type Subscription struct {
	hub   *Hub
	types map[string]bool
	ch    chan devlxdapi.Event
	once  sync.Once
}

// Subscribe returns a subscription to the given event types (all types when
// empty). After Close of the hub the subscription's channel is closed at
// once.
func (h *Hub) Subscribe(types []string) *Subscription {
	s := &Subscription{hub: h, ch: make(chan devlxdapi.Event, Buffer)}
	if len(types) > 0 {
		s.types = make(map[string]bool, len(types))
		for _, t := range types {
			s.types[t] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.once.Do(func() { close(s.ch) })
		return s
	}
	if h.subs == nil {
		h.subs = make(map[*Subscription]struct{})
	}
	h.subs[s] = struct{}{}
	return s
}

// Events returns the channel of events; it is closed when the subscription
// is closed, dropped for lagging, or the hub is closed.
func (s *Subscription) Events() <-chan devlxdapi.Event { return s.ch }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.closeLocked()
}

func (s *Subscription) closeLocked() {
	delete(s.hub.subs, s)
	s.once.Do(func() { close(s.ch) })
}

// Publish delivers e to the matching subscribers and returns how many got it.
func (h *Hub) Publish(e devlxdapi.Event) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for s := range h.subs {
		if s.types != nil && !s.types[e.Type] {
			continue
		}
		select {
		case s.ch <- e:
			n++
		default:
			s.closeLocked()
		}
	}
	return n
}

// Len returns the number of subscribers.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close closes every subscription; later subscriptions are closed at once.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		s.closeLocked()
	}
}

// Reopen lets a closed hub accept subscriptions again.
func (h *Hub) Reopen() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = false
}
