package devlxd

import (
	"sync"
	"time"
)

// lifoTokens is a pool of tokens whose waiters are served newest first.
//
// Under a storm more connections arrive than the server can handshake
// before their clients give up (5 s). Served oldest first, every connection
// would wait about as long as the queue is deep, so once that exceeds the
// clients' timeout nearly all of them time out and retry, and the server
// works for nobody. Served newest first, the connections that are handshaken
// are the ones whose clients are still waiting; the oldest give up (see
// acquire's timeout) and, when their clients retry, arrive as the newest.
// With an empty queue (any normal moment) the order does not matter.
type lifoTokens struct {
	mu        sync.Mutex
	size      int // tokens in all
	free      int
	waiters   []*tokenWaiter // newest last
	abandoned int            // waiters that gave up and are still in the slice
	// onGrant, when set (by tests, before the first acquire), is called
	// with the who of each acquireFor as its token is granted, in the
	// order the pool grants them (under mu).
	onGrant func(who string)
}

type tokenWaiter struct {
	who       string        // names the waiter to onGrant
	granted   chan struct{} // receives the token
	abandoned bool          // gave up (under lifoTokens.mu)
}

func newLIFOTokens(n int) *lifoTokens { return &lifoTokens{size: n, free: n} }

// inUse returns how many tokens are taken.
func (p *lifoTokens) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size - p.free
}

// acquire takes a token, waiting at most timeout, or until stop is closed;
// it reports whether it got one (then release must be called).
func (p *lifoTokens) acquire(timeout time.Duration, stop <-chan struct{}) bool {
	return p.acquireFor("", timeout, stop)
}

// acquireFor is acquire on behalf of who (an instance), which onGrant is
// told.
func (p *lifoTokens) acquireFor(who string, timeout time.Duration, stop <-chan struct{}) bool {
	p.mu.Lock()
	if p.free > 0 {
		p.free--
		p.granted(who)
		p.mu.Unlock()
		return true
	}
	w := &tokenWaiter{who: who, granted: make(chan struct{}, 1)}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.granted:
		return true
	case <-t.C:
	case <-stop:
	}
	p.mu.Lock()
	select {
	case <-w.granted:
		// Granted as the wait ended: hand the token on.
		p.mu.Unlock()
		p.release()
		return false
	default:
	}
	w.abandoned = true
	p.abandoned++
	if p.abandoned > 64 && p.abandoned > len(p.waiters)/2 {
		// Under a long overload the oldest waiters are never reached:
		// drop the ones that gave up so the slice stays the size of the
		// live queue.
		live := p.waiters[:0]
		for _, x := range p.waiters {
			if !x.abandoned {
				live = append(live, x)
			}
		}
		clear(p.waiters[len(live):])
		p.waiters, p.abandoned = live, 0
	}
	p.mu.Unlock()
	return false
}

// release returns a token: to the newest waiter still waiting, else to the
// pool.
func (p *lifoTokens) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.waiters); n > 0; n = len(p.waiters) {
		w := p.waiters[n-1]
		p.waiters[n-1] = nil
		p.waiters = p.waiters[:n-1]
		if w.abandoned {
			p.abandoned--
			continue
		}
		p.granted(w.who)
		w.granted <- struct{}{}
		return
	}
	p.free++
}

// granted tells onGrant of a grant to who; p.mu is held.
func (p *lifoTokens) granted(who string) {
	if p.onGrant != nil {
		p.onGrant(who)
	}
}

// waiting returns how many acquire calls wait for a token.
func (p *lifoTokens) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters) - p.abandoned
}
