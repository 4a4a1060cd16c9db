package httpdrain

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/guestlink/guestlink/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// pipeListener hands the server the server ends of in-memory pipes, so the
// server runs inside a synctest bubble (a goroutine blocked on a pipe is
// durably blocked; one blocked on a socket is not).
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new connection to the server.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-l.closed:
		t.Fatal("dialing: listener closed")
	}
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// get sends GET path on c and returns the answer's body.
func get(c net.Conn, r *bufio.Reader, path string) (string, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: drain\r\n\r\n"); err != nil {
		return "", err
	}
	var resp fasthttp.Response
	if err := resp.Read(r); err != nil {
		return "", err
	}
	return string(resp.Body()), nil
}

// TestShutdownEndsWhenDrained runs a fasthttp server in a synctest bubble
// (its clock moves only when every goroutine waits on it) and shuts it down
// in three states. fasthttp's own shutdown looks at its count of open
// connections every 100 ms, so a server whose kept-alive connection it has
// just closed returned 100 ms later on the bubble's clock; with the Drain it
// returns at once, at the same instant. A request in flight is still waited
// for: the shutdown has not returned while its handler runs (synctest.Wait:
// everything else is blocked), and its answer reaches the client.
func TestShutdownEndsWhenDrained(t *testing.T) {
	tests := []struct {
		name string
		// idle is how many connections are kept alive and idle after
		// one answered request; inFlight whether one more has a
		// request whose handler waits for the test.
		idle     int
		inFlight bool
	}{
		{"no connection", 0, false},
		{"one idle kept-alive connection", 1, false},
		{"fifty idle kept-alive connections", 50, false},
		{"a request in flight beside idle connections", 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				handling := make(chan struct{}, 1)
				srv := &fasthttp.Server{
					Handler: func(ctx *fasthttp.RequestCtx) {
						if string(ctx.Path()) == "/slow" {
							handling <- struct{}{}
							<-release
						}
						ctx.SetBodyString("ok")
					},
					IdleTimeout: time.Minute,
					// fasthttp's process-wide date updater, started by
					// the first answer with a date, would never leave
					// the bubble.
					NoDefaultDate: true,
				}
				d := Track(srv)
				ln := newPipeListener()
				served := make(chan error, 1)
				go func() { served <- d.Serve(func() error { return srv.Serve(ln) }) }()
				synctest.Wait() // serving: waiting in Accept

				var clients []net.Conn
				for range tt.idle {
					c := ln.dial(t)
					clients = append(clients, c)
					if body, err := get(c, bufio.NewReader(c), "/"); err != nil || body != "ok" {
						t.Fatalf("GET /: %q, %v", body, err)
					}
				}
				var slow chan string
				if tt.inFlight {
					c := ln.dial(t)
					clients = append(clients, c)
					slow = make(chan string, 1)
					go func() {
						body, err := get(c, bufio.NewReader(c), "/slow")
						if err != nil {
							body = "error: " + err.Error()
						}
						slow <- body
					}()
					<-handling
				}

				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				shut := make(chan error, 1)
				go func() { shut <- d.Shutdown(ctx, srv.ShutdownWithContext) }()
				if tt.inFlight {
					synctest.Wait()
					select {
					case err := <-shut:
						t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
					default:
					}
					if got := time.Since(t0); got != 0 {
						t.Fatalf("the clock moved %v before the handler was released", got)
					}
					close(release)
					if body := <-slow; body != "ok" {
						t.Fatalf("the request in flight was answered %q, want ok", body)
					}
				}
				if err := <-shut; err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
				if got := time.Since(t0); got != 0 {
					t.Fatalf("Shutdown returned %v after it began on the bubble's clock, want at once (it waited for fasthttp's next check)", got)
				}
				if !d.Drained() {
					t.Fatal("Drained is false after Shutdown returned")
				}
				if err := <-served; err != nil {
					t.Fatalf("Serve: %v", err)
				}
				// Every idle connection was closed by the server.
				for i, c := range clients[:tt.idle] {
					if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
						t.Errorf("idle connection %d read after Shutdown: %v, want it closed", i, err)
					}
				}
				for _, c := range clients {
					c.Close()
				}
				waitWorkerPool()
			})
		})
	}
}

// TestShutdownHonoursItsContext shuts down a server whose handler never
// returns: Shutdown returns the context's error when it ends, as fasthttp
// would, and the Drain does not claim the server drained.
func TestShutdownHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		handling := make(chan struct{})
		srv := &fasthttp.Server{NoDefaultDate: true, Handler: func(ctx *fasthttp.RequestCtx) {
			close(handling)
			<-release
		}}
		d := Track(srv)
		ln := newPipeListener()
		served := make(chan error, 1)
		go func() { served <- d.Serve(func() error { return srv.Serve(ln) }) }()
		synctest.Wait() // serving: waiting in Accept
		c := ln.dial(t)
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			_, _ = get(c, bufio.NewReader(c), "/")
		}()
		<-handling
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		t0 := time.Now()
		if err := d.Shutdown(ctx, srv.ShutdownWithContext); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown with a request that never ends: %v, want the context's deadline", err)
		}
		if got := time.Since(t0); got != time.Second {
			t.Fatalf("Shutdown returned after %v, want its context's 1s", got)
		}
		if d.Drained() {
			t.Fatal("Drained with a request still running")
		}
		close(release)
		<-answered
		c.Close()
		<-served
		waitWorkerPool()
	})
}

// waitWorkerPool moves the bubble's clock past a round of the stopped
// server's worker pool cleaner (it sleeps 10 s between rounds), so that it
// sees its pool stopped and ends with the bubble.
func waitWorkerPool() { time.Sleep(11 * time.Second) }
