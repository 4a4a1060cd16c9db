// Package httpdrain ends a fasthttp server's shutdown as soon as its last
// serve loop and connection are gone, instead of at fasthttp's next check
// of its open-connection count (every 100 ms).
//
// fasthttp's ShutdownWithContext closes the listeners and the idle
// connections, then looks at its count of open connections, and while any
// is open waits 100 ms before it looks again: a server whose idle kept-alive
// connections it had just closed (their serving goroutines not yet gone)
// waited one or two of those checks, a devlxd server with 3,000 kept
// connections 200 ms, in every daemon stop. A Drain counts the same things
// (the server's serve loops and, through its ConnState hook, its
// connections) and ends the shutdown's wait when both reach zero.
package httpdrain

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// Drain counts a fasthttp server's serve loops and open connections. Make
// it with Track before the server serves, run each serve loop through
// Serve and stop the server with Shutdown.
type Drain struct {
	next func(net.Conn, fasthttp.ConnState)

	mu       sync.Mutex
	loops    int  // Serve calls running
	conns    int  // connections new and not yet closed or hijacked
	stopping bool // Shutdown was called
	drained  chan struct{}
	closed   bool // drained is closed
}

// Track counts s's connections through its ConnState hook, calling the hook
// s had before (set it first). Call it before s serves.
func Track(s *fasthttp.Server) *Drain {
	d := &Drain{next: s.ConnState, drained: make(chan struct{})}
	s.ConnState = d.state
	return d
}

// state is the server's ConnState hook.
func (d *Drain) state(c net.Conn, st fasthttp.ConnState) {
	if d.next != nil {
		d.next(c, st)
	}
	switch st {
	case fasthttp.StateNew:
		d.add(&d.conns, 1)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		d.add(&d.conns, -1)
	}
}

// Serve runs serve, one of the server's serve loops (a fiber App's
// Listener, a fasthttp Server's Serve), counted: a shutdown is not over
// while a serve loop runs, since it may still hand on a connection. A
// serve loop begins before Shutdown (as fasthttp's own shutdown, a Drain
// does not wait for one that had not begun).
func (d *Drain) Serve(serve func() error) error {
	d.add(&d.loops, 1)
	defer d.add(&d.loops, -1)
	return serve()
}

func (d *Drain) add(n *int, delta int) {
	d.mu.Lock()
	*n += delta
	d.checkLocked()
	d.mu.Unlock()
}

// checkLocked closes drained once the shutdown began and nothing is left.
func (d *Drain) checkLocked() {
	if d.stopping && !d.closed && d.loops == 0 && d.conns <= 0 {
		d.closed = true
		close(d.drained)
	}
}

// Shutdown runs shutdown, the server's ShutdownWithContext (fasthttp's or a
// fiber App's, which closes the listeners and idle connections and waits
// for the rest), and returns when it does or as soon as no serve loop and no
// connection is left. The connections in flight still get until ctx ends:
// Shutdown returns early only when there is nothing left to wait for.
func (d *Drain) Shutdown(ctx context.Context, shutdown func(context.Context) error) error {
	d.mu.Lock()
	d.stopping = true
	d.checkLocked()
	d.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.drained:
			cancel()
		case <-sctx.Done():
		}
	}()
	err := shutdown(sctx)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil && d.Drained() {
		return nil // ended by the drain, not by ctx
	}
	return err
}

// Drained reports whether a shutdown began and the server has no serve loop
// and no connection left.
func (d *Drain) Drained() bool {
	select {
	case <-d.drained:
		return true
	default:
		return false
	}
}
