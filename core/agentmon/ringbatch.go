package agentmon

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Ring reads of backends that read batches (contract.RingBatchReader) are
// gathered: a read that finds the batcher idle goes at once (a lone guest's
// word is read as soon as it is announced: with LXD's 16-byte ring a later
// read may find STARTED already overwritten by CONNECTED); reads that come
// while it is busy wait up to ringBatchLinger for others, then one call
// reads them all, at most ringBatchMax at once. With 10,000 guests
// heartbeating every 5 s that is a few dozen calls to the plugin per second
// instead of 2,000.
const (
	ringBatchLinger = 10 * time.Millisecond
	ringBatchMax    = 256
	// ringBatchCalls is how many batch calls may be in flight at once: a
	// slow call (a busy plugin) must not hold every other guest's read
	// back, or heartbeats arrive late, agents are marked lost and the lost
	// ones are read every second, which slows the calls further.
	ringBatchCalls = 8
)

// ringBatcher gathers the ring reads of one backend.
type ringBatcher struct {
	backend contract.Backend
	timeout time.Duration
	calls   chan struct{} // a slot per batch call in flight

	mu      sync.Mutex
	queue   []*ringRead
	running bool
}

// ringRead is one monitor's read waiting in a batch.
type ringRead struct {
	h    contract.Handle
	max  int
	res  contract.RingData
	done chan struct{}
}

// batcher returns the batcher of backend, creating it on first use, or nil
// when backend does not read batches (or cannot be told apart from
// another, as a map key).
func (s *Service) batcher(backend contract.Backend) *ringBatcher {
	rd, ok := backend.(contract.RingBatchReader)
	if !ok || !reflect.TypeOf(rd).Comparable() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batchers[rd]
	if b == nil {
		b = &ringBatcher{backend: backend, timeout: s.cfg.RequestTimeout, calls: make(chan struct{}, ringBatchCalls)}
		s.batchers[rd] = b
	}
	return b
}

// read queues a read and waits for its batch (or ctx).
func (b *ringBatcher) read(ctx context.Context, h contract.Handle, max int) ([]byte, error) {
	r := &ringRead{h: h, max: max, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.res.Data, r.res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run reads batches while reads are queued, then ends. Its first batch
// goes at once; later ones gather for ringBatchLinger.
func (b *ringBatcher) run() {
	linger := time.NewTimer(0)
	defer linger.Stop()
	for {
		<-linger.C
		b.mu.Lock()
		n := min(len(b.queue), ringBatchMax)
		if n == 0 {
			b.running = false
			b.queue = nil
			b.mu.Unlock()
			return
		}
		batch := make([]*ringRead, n)
		copy(batch, b.queue)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		more := len(b.queue) >= ringBatchMax
		b.mu.Unlock()
		b.calls <- struct{}{}
		go b.call(batch)
		if more {
			linger.Reset(0) // a full batch is waiting: no need to gather
		} else {
			linger.Reset(ringBatchLinger)
		}
	}
}

// call reads one batch and hands each read its result, then frees its
// slot.
func (b *ringBatcher) call(batch []*ringRead) {
	defer func() { <-b.calls }()
	reads := make([]contract.RingRead, len(batch))
	for i, r := range batch {
		reads[i] = contract.RingRead{Handle: r.h, Max: r.max}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	res := contract.ReadRings(ctx, b.backend, reads)
	cancel()
	for i, r := range batch {
		r.res = res[i]
		close(r.done)
	}
}
