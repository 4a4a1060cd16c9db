package devlxd

import (
	"container/list"
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// Defaults of the kept connections (Config.KeptMemory).
const (
	// DefaultKeptMemory is the memory the idle kept-alive agent
	// connections may hold together: 64 MiB, 2,048 connections (every
	// guest of a thousand, about a fifth of 10,000; docs/guest-link.md).
	DefaultKeptMemory = 64 << 20
	// KeptConnBytes is what one idle kept-alive connection is counted at
	// in the daemon; the memory allowance is divided by it. It is what a
	// daemon of 10,000 fleet guests measured (about 31 KiB each: the TLS
	// connection's state and read buffers, its guest's parsed client
	// certificate, the AEADs, fasthttp's connection state with
	// ReduceMemoryUsage and the serving goroutine's 8 KiB stack), rounded
	// up. In process, one guest's connection measures less (about 14
	// KiB, TestKeptConnBytes, which fails if that cost ever passes this
	// constant): the daemon's are larger (buffers grown by the storm's
	// requests), and the collector's headroom comes on top in RSS.
	KeptConnBytes = 32 << 10
)

// keptConns tracks the connections idle between two requests (fasthttp's
// ConnState hook) and keeps at most limit of them: past it, the one idle
// the longest is closed. A connection serving a request is never closed
// here, so no request is refused; a guest whose kept connection was closed
// resumes its TLS session on a new one.
type keptConns struct {
	limit int // idle connections kept; 0 keeps none

	mu   sync.Mutex
	idle list.List // of net.Conn, idle the longest first
	by   map[net.Conn]*list.Element
	// closed counts the idle connections closed for the budget (the
	// limit or a link's need of a descriptor).
	closed uint64
}

func newKeptConns(limit int) *keptConns {
	return &keptConns{limit: max(limit, 0), by: map[net.Conn]*list.Element{}}
}

// state is fasthttp's ConnState hook: it runs on the connection's serving
// goroutine at each change.
func (k *keptConns) state(c net.Conn, st fasthttp.ConnState) {
	var evict []net.Conn
	k.mu.Lock()
	switch st {
	case fasthttp.StateIdle:
		if _, ok := k.by[c]; !ok {
			k.by[c] = k.idle.PushBack(c)
		}
		for k.idle.Len() > k.limit {
			evict = append(evict, k.removeLocked(k.idle.Front()))
		}
		k.closed += uint64(len(evict))
	default: // active, closed, hijacked: not idle
		if e, ok := k.by[c]; ok {
			k.removeLocked(e)
		}
	}
	k.mu.Unlock()
	for _, c := range evict {
		// The serving goroutine's read of the next request ends and it
		// lets the connection go; its link descriptor is released.
		// Closing a TLS connection writes its close_notify (bounded by
		// a deadline): not on this connection's serving goroutine.
		go c.Close()
	}
}

func (k *keptConns) removeLocked(e *list.Element) net.Conn {
	c := k.idle.Remove(e).(net.Conn)
	delete(k.by, c)
	return c
}

// closeOldest closes the connection idle the longest and reports whether
// there was one.
func (k *keptConns) closeOldest() bool {
	k.mu.Lock()
	e := k.idle.Front()
	if e == nil {
		k.mu.Unlock()
		return false
	}
	c := k.removeLocked(e)
	k.closed++
	k.mu.Unlock()
	go c.Close() // not on the caller's goroutine, a link host's accept

	return true
}

// stats returns the idle connections kept, the limit and how many were
// closed for the budget.
func (k *keptConns) stats() (idle, limit int, closed uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.idle.Len(), k.limit, k.closed
}
