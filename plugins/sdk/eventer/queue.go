package eventer

import (
	"context"
	"sync"
)

// DefaultLimit is the number of queued unkeyed items a Queue made by NewQueue
// holds before it drops new ones.
const DefaultLimit = 4096

// Queue is a FIFO of events between a producer that must never block and a
// consumer that may be slow: repeated events of the same key coalesce while
// one of them is still queued, and the queue holds at most a fixed number of
// items, so memory stays bounded whatever the producer does. It is safe for
// concurrent use. The zero value is not usable; call NewQueue.
//
// The limit counts unkeyed items only. A keyed item is queued at most once
// per key, so keyed items are bounded by the number of distinct keys (the
// Eventer's: three kinds of wake-up hint per guest); counting them against
// the limit would drop the hints of a host with more guests than the limit
// exactly when they all have news at once (a daemon restart).
type Queue[T any] struct {
	mu      sync.Mutex
	items   []item[T]
	pending map[string]bool // keys of queued coalescible items
	ready   chan struct{}   // capacity 1: something was pushed or Close was called
	closed  bool
	limit   int
	unkeyed int // queued items without a key: what the limit bounds
	dropped uint64
}

type item[T any] struct {
	v   T
	key string
}

// NewQueue returns an empty queue holding at most DefaultLimit items.
func NewQueue[T any]() *Queue[T] {
	return &Queue[T]{pending: map[string]bool{}, ready: make(chan struct{}, 1), limit: DefaultLimit}
}

// Push appends v without blocking and reports whether it was queued. When
// key is not empty and an item with the same key is still queued, v is
// dropped: the queued item already tells the consumer the news. When the
// queue is closed, or v is unkeyed and the limit of unkeyed items is
// reached, v is dropped too.
func (q *Queue[T]) Push(v T, key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || (key != "" && q.pending[key]) || (key == "" && q.unkeyed >= q.limit) {
		q.dropped++
		return false
	}
	if key != "" {
		q.pending[key] = true
	} else {
		q.unkeyed++
	}
	q.items = append(q.items, item[T]{v: v, key: key})
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// Close makes Pop return false once the queued items are consumed. Pushes
// after Close are dropped.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Pop removes and returns the oldest item, waiting for one. It returns false
// when ctx ends or the queue is closed and empty.
func (q *Queue[T]) Pop(ctx context.Context) (T, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			it := q.items[0]
			q.items[0] = item[T]{}
			q.items = q.items[1:]
			if len(q.items) == 0 {
				q.items = nil // let the backing array go
			}
			if it.key != "" {
				delete(q.pending, it.key)
			} else {
				q.unkeyed--
			}
			q.mu.Unlock()
			return it.v, true
		}
		closed := q.closed
		q.mu.Unlock()
		var zero T
		if closed {
			return zero, false
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return zero, false
		}
	}
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Dropped returns how many pushed items were dropped so far.
func (q *Queue[T]) Dropped() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}
