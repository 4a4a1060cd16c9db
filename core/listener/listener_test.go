package listener

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fakeListener hands out what is pushed to it, in order: a connection or
// an error. Accept blocks until something is pushed or the listener is
// closed.
type fakeListener struct {
	ch     chan result
	closed chan struct{}
	once   sync.Once
}

type result struct {
	c   net.Conn
	err error
}

func newFakeListener() *fakeListener {
	return &fakeListener{ch: make(chan result, 1000), closed: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case r := <-f.ch:
		return r.c, r.err
	case <-f.closed:
		return nil, &net.OpError{Op: "accept", Net: "fake", Err: net.ErrClosed}
	}
}

func (f *fakeListener) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeListener) Addr() net.Addr { return fakeAddr("fake:1") }

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }

// emfile is the error accept4 gives a process out of descriptors.
func emfile() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// peerConn is one end of a pipe that claims a TCP peer address.
type peerConn struct {
	net.Conn
	peer   *net.TCPAddr
	closed chan struct{}
	once   sync.Once
}

func (p *peerConn) RemoteAddr() net.Addr { return p.peer }

func (p *peerConn) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.Conn.Close()
}

func (p *peerConn) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// pipeFrom returns the server end (with peer ip) and the client end of a
// new pipe.
func pipeFrom(ip string) (*peerConn, net.Conn) {
	s, c := net.Pipe()
	return &peerConn{Conn: s, peer: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, closed: make(chan struct{})}, c
}

// logLines is a slog handler's output, safe to read while written.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

var errorsField = regexp.MustCompile(`errors=(\d+)`)

// count returns the lines with msg and the sum of their errors= fields.
func (l *logLines) count(msg string) (lines, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		if !bytes.Contains(line, []byte(`msg="`+msg+`"`)) {
			continue
		}
		lines++
		if m := errorsField.FindSubmatch(line); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			errs += n
		}
	}
	return lines, errs
}

// TestRetry runs Retry's Accept through scripted accept errors on a fake
// clock: each case says what the listener returned, when the connection
// after them must be accepted, and how many log lines may say so.
func TestRetry(t *testing.T) {
	boom := errors.New("accept: something unexpected")
	cases := []struct {
		name  string
		errs  []error
		after time.Duration // from the first accept to the connection
		warns int           // "accept failing" lines
	}{
		// 5 + 10 + 20 + 40 ms: the back-off doubles from 5 ms.
		{name: "four EMFILE", errs: repeat(emfile(), 4), after: 75 * time.Millisecond, warns: 1},
		// The waits reach 1 s and stay there: 5+10+...+640 = 1,275 ms for
		// the first 8, then 32 s; the lines come at 0 s, then at the first
		// error 10 s, 20 s and 30 s after the last line: 4 lines for 40
		// errors.
		{name: "forty EMFILE", errs: repeat(emfile(), 40), after: 33275 * time.Millisecond, warns: 4},
		{name: "ENFILE", errs: []error{os.NewSyscallError("accept4", syscall.ENFILE)}, after: 5 * time.Millisecond, warns: 1},
		{name: "ECONNABORTED", errs: []error{os.NewSyscallError("accept4", syscall.ECONNABORTED)}, after: 5 * time.Millisecond, warns: 1},
		// An error of no known kind is retried as well: no accept error
		// ends a server but a close.
		{name: "an unknown error", errs: []error{boom, boom}, after: 15 * time.Millisecond, warns: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs logLines
				fake := newFakeListener()
				for _, err := range tc.errs {
					fake.ch <- result{err: err}
				}
				srv, _ := pipeFrom("192.0.2.1")
				fake.ch <- result{c: srv}
				ln := Retry(fake, RetryConfig{Name: "test", Logger: logs.logger()})
				defer ln.Close()
				start := time.Now()
				c, err := ln.Accept()
				if err != nil {
					t.Fatalf("Accept: %v", err)
				}
				if c != srv {
					t.Fatalf("Accept returned %v, want the scripted connection", c)
				}
				if got := time.Since(start); got != tc.after {
					t.Errorf("connection accepted after %v, want %v", got, tc.after)
				}
				warns, logged := logs.count("accept failing, backing off")
				if warns != tc.warns {
					t.Errorf("%d \"accept failing\" lines for %d errors, want %d:\n%s", warns, len(tc.errs), tc.warns, logs.buf.String())
				}
				// One interval later every error has been counted in a
				// line, and at most one line came after the failures
				// (fewer lines than errors).
				time.Sleep(DefaultLogInterval)
				warns, logged = logs.count("accept failing, backing off")
				again, more := logs.count("accepting again")
				if logged+more != len(tc.errs) || warns+again > tc.warns+1 || (len(tc.errs) > 2 && warns+again >= len(tc.errs)) {
					t.Errorf("lines count %d errors over %d lines for %d errors: want all counted, fewer lines than errors:\n%s",
						logged+more, warns+again, len(tc.errs), logs.buf.String())
				}
			})
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// TestRetryBackoffResets checks that a successful accept starts the
// back-off over: EMFILE, a connection, EMFILE again waits 5 ms, not 10.
func TestRetryBackoffResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeListener()
		a, _ := pipeFrom("192.0.2.1")
		b, _ := pipeFrom("192.0.2.1")
		fake.ch <- result{err: emfile()}
		fake.ch <- result{c: a}
		fake.ch <- result{err: emfile()}
		fake.ch <- result{c: b}
		ln := Retry(fake, RetryConfig{Logger: slog.New(slog.DiscardHandler)})
		defer ln.Close()
		for i, want := range []net.Conn{a, b} {
			start := time.Now()
			c, err := ln.Accept()
			if err != nil || c != want {
				t.Fatalf("accept %d: %v, %v", i, c, err)
			}
			if got := time.Since(start); got != MinBackoff {
				t.Errorf("accept %d after %v, want %v", i, got, MinBackoff)
			}
		}
	})
}

// TestRetryClosed checks that a closed listener still ends Accept (for
// shutdown), whether it was waiting in the listener or in a back-off.
func TestRetryClosed(t *testing.T) {
	for _, inBackoff := range []bool{false, true} {
		t.Run(fmt.Sprintf("in back-off %v", inBackoff), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFakeListener()
				if inBackoff {
					// Ten errors: the eleventh wait is 1 s.
					for _, err := range repeat(emfile(), 11) {
						fake.ch <- result{err: err}
					}
				}
				ln := Retry(fake, RetryConfig{Logger: slog.New(slog.DiscardHandler)})
				done := make(chan error, 1)
				start := time.Now()
				go func() {
					_, err := ln.Accept()
					done <- err
				}()
				synctest.Wait() // Accept is blocked (in the listener or a wait)
				closedAt := time.Since(start)
				ln.Close()
				err := <-done
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
				}
				if got := time.Since(start); got != closedAt {
					t.Errorf("Accept returned %v after Close, want at once", got-closedAt)
				}
				// Accept on a closed listener fails at once too.
				if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("second Accept: %v, want net.ErrClosed", err)
				}
			})
		})
	}
}

// TestTemporary lists the errors Temporary reports.
func TestTemporary(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{emfile(), true},
		{os.NewSyscallError("accept4", syscall.ENFILE), true},
		{os.NewSyscallError("accept4", syscall.ENOBUFS), true},
		{os.NewSyscallError("accept4", syscall.ECONNABORTED), true},
		{net.ErrClosed, false},
		{errors.New("boom"), false},
	} {
		if got := Temporary(tc.err); got != tc.want {
			t.Errorf("Temporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestLimitCaps opens connections from several peers past the caps (3 in
// all, 2 per peer): those over a cap are closed at accept, never queued,
// and a closed connection gives its place back.
func TestLimitCaps(t *testing.T) {
	fake := newFakeListener()
	var logs logLines
	ln := Limit(fake, Limits{Name: "test", Logger: logs.logger(), MaxConns: 3, MaxPerPeer: 2})
	defer ln.Close()
	type try struct {
		peer  string
		admit bool
	}
	tries := []try{
		{"192.0.2.1", true},
		{"192.0.2.1", true},
		{"192.0.2.1", false}, // third of one peer
		{"192.0.2.2", true},
		{"192.0.2.3", false}, // fourth in all
	}
	var admitted []net.Conn
	var conns []*peerConn
	for _, tr := range tries {
		s, _ := pipeFrom(tr.peer)
		conns = append(conns, s)
		fake.ch <- result{c: s}
	}
	for range 3 {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		admitted = append(admitted, c)
	}
	// The next Accept refuses the last try and waits for another.
	next := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		next <- c
	}()
	<-conns[len(conns)-1].closed
	for i, tr := range tries {
		if conns[i].isClosed() == tr.admit {
			t.Errorf("connection %d from %s: closed %v, want admitted %v", i, tr.peer, conns[i].isClosed(), tr.admit)
		}
	}
	if st := ln.Stats(); st.Open != 3 || st.Refused != 2 {
		t.Errorf("stats %+v, want 3 open, 2 refused", st)
	}
	if lines, _ := logs.count("connections over the limit closed at accept"); lines != 1 {
		t.Errorf("%d lines about refused connections, want 1 (one per interval):\n%s", lines, logs.buf.String())
	}
	// A place frees: the next connection is admitted.
	admitted[0].Close()
	admitted[0].Close() // twice gives back one place
	late, _ := pipeFrom("192.0.2.3")
	fake.ch <- result{c: late}
	if c := <-next; c == nil || c.(*conn).NetConn() != late {
		t.Fatalf("after a close: %v, want the new connection", c)
	}
	if st := ln.Stats(); st.Open != 3 {
		t.Errorf("stats %+v, want 3 open", st)
	}

	// A shared listener counts in the same budget.
	other := newFakeListener()
	shared := ln.Share(other, "other")
	s, _ := pipeFrom("192.0.2.9")
	other.ch <- result{c: s}
	fake.ch <- result{err: net.ErrClosed}
	other.ch <- result{err: net.ErrClosed}
	if _, err := shared.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("shared Accept: %v, want the listener's error", err)
	}
	if !s.isClosed() {
		t.Error("a connection over the shared cap was admitted")
	}
}

// TestLimitFirstRequest checks the first-request deadline on a fake
// clock: a connection that sends nothing fails its read when it ends, even
// though the server asked for a later deadline (as fasthttp does); one that
// sends its header in time gets the server's deadline back.
func TestLimitFirstRequest(t *testing.T) {
	const first = 2 * time.Second
	cases := []struct {
		name   string
		send   []string // pieces the client writes, a second apart
		failAt time.Duration
	}{
		{name: "silent", failAt: first},
		{name: "half a header", send: []string{"GET / HTTP/1.1\r\nHost: x\r\n"}, failAt: first},
		// The header's end split across two reads.
		{name: "a header in two pieces", send: []string{"GET / HTTP/1.1\r\n", "\r\n"}, failAt: time.Minute},
		{name: "a bare-LF header", send: []string{"GET / HTTP/1.0\n\n"}, failAt: time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFakeListener()
				ln := Limit(fake, Limits{FirstRequest: first, Logger: slog.New(slog.DiscardHandler)})
				defer ln.Close()
				srv, cli := pipeFrom("192.0.2.1")
				defer cli.Close()
				fake.ch <- result{c: srv}
				start := time.Now()
				c, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// The server's own deadline, as fasthttp's ReadTimeout.
				if err := c.SetReadDeadline(start.Add(time.Minute)); err != nil {
					t.Fatal(err)
				}
				go func() {
					for _, p := range tc.send {
						if _, err := cli.Write([]byte(p)); err != nil {
							return
						}
						time.Sleep(time.Second / 2)
					}
				}()
				buf := make([]byte, 256)
				for {
					if _, err = c.Read(buf); err != nil {
						break
					}
				}
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("read ended with %v, want a timeout", err)
				}
				if got := time.Since(start); got != tc.failAt {
					t.Errorf("read timed out after %v, want %v", got, tc.failAt)
				}
			})
		})
	}
}

// TestLimitWriteTimeout checks the per-write deadline on a fake clock: a
// client that never reads has its write fail after the write timeout; a
// client that reads a piece every 20 s (under the 30 s timeout) receives a
// response that takes far longer than 30 s in all.
func TestLimitWriteTimeout(t *testing.T) {
	const timeout = 30 * time.Second
	chunk := bytes.Repeat([]byte("x"), 1024)
	t.Run("never reads", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := newFakeListener()
			ln := Limit(fake, Limits{WriteTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
			srv, cli := pipeFrom("192.0.2.1")
			defer cli.Close()
			fake.ch <- result{c: srv}
			c, _ := ln.Accept()
			defer c.Close()
			start := time.Now()
			_, err := c.Write(chunk)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write to a client that never reads: %v, want a timeout", err)
			}
			if got := time.Since(start); got != timeout {
				t.Errorf("write failed after %v, want %v", got, timeout)
			}
		})
	})
	t.Run("reads slowly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := newFakeListener()
			ln := Limit(fake, Limits{WriteTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
			srv, cli := pipeFrom("192.0.2.1")
			fake.ch <- result{c: srv}
			c, _ := ln.Accept()
			const chunks = 10
			done := make(chan struct{})
			defer func() { <-done }()
			go func() {
				defer close(done)
				defer cli.Close()
				buf := make([]byte, len(chunk))
				for {
					time.Sleep(20 * time.Second)
					if _, err := io.ReadFull(cli, buf); err != nil {
						return
					}
				}
			}()
			start := time.Now()
			for i := range chunks {
				if _, err := c.Write(chunk); err != nil {
					t.Fatalf("write %d after %v: %v", i, time.Since(start), err)
				}
			}
			if got, want := time.Since(start), chunks*20*time.Second; got != want {
				t.Errorf("response took %v, want %v", got, want)
			}
			c.Close()
		})
	})
}

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	deadlines []time.Time
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// TestStreamWriter checks that each flush of a stream extends the
// connection's write deadline by the timeout from that flush, and that
// what was written arrives.
func TestStreamWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		c := &deadlineConn{}
		w := StreamWriter(bufio.NewWriter(&out), c, 30*time.Second)
		start := time.Now()
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute) // longer than the timeout between writes
		}
		if got, want := out.String(), "data: 0\n\ndata: 1\n\ndata: 2\n\n"; got != want {
			t.Errorf("stream %q, want %q", got, want)
		}
		want := []time.Time{start.Add(30 * time.Second), start.Add(90 * time.Second), start.Add(150 * time.Second)}
		if !slices.Equal(c.deadlines, want) {
			t.Errorf("write deadlines %v, want %v (30 s after each flush)", c.deadlines, want)
		}
		if StreamWriter(bufio.NewWriter(&out), c, 0) == nil {
			t.Error("StreamWriter without a timeout returned nil")
		}
	})
}

// tlsPeerConn is a peerConn that says it is a TLS connection.
type tlsPeerConn struct{ *peerConn }

func (tlsPeerConn) ConnectionState() tls.ConnectionState {
	return tls.ConnectionState{ServerName: "guestlink.test"}
}

// TestLimitKeepsTLS checks that a TLS connection stays one through Limit:
// servers read its client certificates from ConnectionState (fasthttp
// finds it by a type assertion), and its own type is reachable.
func TestLimitKeepsTLS(t *testing.T) {
	fake := newFakeListener()
	ln := Limit(fake, Limits{WriteTimeout: time.Second})
	s, _ := pipeFrom("192.0.2.1")
	fake.ch <- result{c: tlsPeerConn{s}}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		t.Fatalf("%T over a TLS connection has no ConnectionState", c)
	}
	if got := ts.ConnectionState().ServerName; got != "guestlink.test" {
		t.Errorf("ConnectionState().ServerName = %q", got)
	}
	if nc, ok := c.(interface{ NetConn() net.Conn }); !ok || nc.NetConn() != (tlsPeerConn{s}) {
		t.Errorf("NetConn does not return the TLS connection")
	}
}
