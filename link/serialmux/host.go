package serialmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/yamux"
)

// Host is the daemon's side of one guest's serial link. It keeps a session
// up for as long as the guest's chardev socket accepts connections: when a
// session ends (the agent restarted, a keepalive failed) it reconnects and
// synchronises again, so streams keep flowing through one Host. It ends
// (Done) when Close is called or the socket can no longer be reached (QEMU
// exited).
type Host struct {
	redial func(ctx context.Context) (io.ReadWriteCloser, error) // nil: no reconnection

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	sess  *yamux.Session
	conn  io.ReadWriteCloser
	ready chan struct{} // closed when sess is set; replaced after it ended
	err   error         // why the Host ended

	accepts chan accepted
	done    chan struct{}
}

type accepted struct {
	c    net.Conn
	port uint32
}

// reconnectFor bounds how long a Host tries to reach the chardev socket
// again after a session ended.
var reconnectFor = 10 * time.Second

// DialHost connects to the guest's chardev Unix socket at path (the
// LinkEndpoint's Path) and returns at once; the session starts in the
// background when the guest's side answers the handshake (the agent runs).
// Dial waits for it within its ctx, Accept until it delivers a stream. ctx
// bounds only the first connection. QEMU serves one connection per chardev
// at a time: keep one Host per guest.
func DialHost(ctx context.Context, path string) (*Host, error) {
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, fmt.Errorf("connecting to serial link %q: %w", path, err)
		}
		return c, nil
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	return newHost(conn, dial), nil
}

// newHost runs the host side over conn, which it owns; redial reconnects
// after a session ends. Without redial (tests over a net.Pipe) the Host
// ends with its first session.
func newHost(conn io.ReadWriteCloser, redial func(context.Context) (io.ReadWriteCloser, error)) *Host {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{redial: redial, ctx: ctx, cancel: cancel, ready: make(chan struct{}),
		accepts: make(chan accepted), done: make(chan struct{})}
	go h.run(conn)
	return h
}

// run keeps sessions up until Close or until the socket is gone.
func (h *Host) run(conn io.ReadWriteCloser) {
	var cause error
	for {
		h.mu.Lock()
		h.conn = conn
		h.mu.Unlock()
		if err := h.serveOne(conn); err != nil && h.ctx.Err() == nil {
			cause = err
		}
		if h.ctx.Err() != nil {
			cause = ErrClosed
			break
		}
		if h.redial == nil {
			cause = fmt.Errorf("%w: session ended: %v", ErrClosed, cause)
			break
		}
		var err error
		if conn, err = h.reconnect(); err != nil {
			cause = fmt.Errorf("%w: %w", ErrClosed, err)
			break
		}
	}
	h.mu.Lock()
	h.err = cause
	h.mu.Unlock()
	close(h.done)
}

// serveOne synchronises on conn, runs one session and hands its streams to
// Accept until it ends.
func (h *Host) serveOne(conn io.ReadWriteCloser) error {
	rwc, err := hostSync(h.ctx, conn)
	if err != nil {
		conn.Close()
		return err
	}
	sess, err := yamux.Client(rwc, yamuxConfig())
	if err != nil {
		conn.Close()
		return err
	}
	h.mu.Lock()
	h.sess = sess
	close(h.ready)
	h.mu.Unlock()
	defer func() {
		sess.Close()
		h.mu.Lock()
		h.sess = nil
		h.ready = make(chan struct{})
		h.mu.Unlock()
	}()
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			return err
		}
		go h.admit(s)
	}
}

// admit reads a guest stream's header and queues it for Accept.
func (h *Host) admit(s *yamux.Stream) {
	port, ok := streamPort(s)
	if !ok {
		return
	}
	select {
	case h.accepts <- accepted{streamConn{s}, port}:
	case <-h.done:
		s.Close()
	}
}

// reconnect dials the socket again for up to reconnectFor, waiting 50 ms
// between attempts, doubling up to 1 s, without jitter.
func (h *Host) reconnect() (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(reconnectFor)
	bo := &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second}
	for {
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
		c, err := h.redial(ctx)
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || h.ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-h.ctx.Done():
			return nil, h.ctx.Err()
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// session waits for a live session while ctx allows.
func (h *Host) session(ctx context.Context) (*yamux.Session, error) {
	for {
		h.mu.Lock()
		sess, ready := h.sess, h.ready
		h.mu.Unlock()
		if sess != nil && !sess.IsClosed() {
			return sess, nil
		}
		select {
		case <-ready:
		case <-h.done:
			return nil, h.Err()
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the guest's side of the serial link: %w", ctx.Err())
		}
	}
}

// Dial opens a stream to the guest's port (the agent listens on 8443),
// waiting for a session while ctx allows.
func (h *Host) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	sess, err := h.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening serial link stream to port %d: %w", port, err)
	}
	return openStream(ctx, sess, port)
}

// Accept waits for a stream the guest opened and returns it with the port it
// targets (the daemon's advertised link port). Streams with a bad header are
// closed and skipped. After the Host ended it returns an error wrapping
// ErrClosed.
func (h *Host) Accept() (net.Conn, uint32, error) {
	select {
	case a := <-h.accepts:
		return a.c, a.port, nil
	case <-h.done:
		return nil, 0, fmt.Errorf("accepting serial link stream: %w", h.Err())
	}
}

// Done returns a channel closed when the Host ended.
func (h *Host) Done() <-chan struct{} { return h.done }

// Err returns why the Host ended (wrapping ErrClosed), or nil while it runs.
func (h *Host) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Connected reports whether a session is up (the guest answered).
func (h *Host) Connected() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sess != nil && !h.sess.IsClosed()
}

// Close ends the Host, its session and its streams.
func (h *Host) Close() error {
	h.cancel()
	h.mu.Lock()
	sess, conn := h.sess, h.conn
	h.mu.Unlock()
	if sess != nil {
		sess.Close()
	}
	if conn != nil {
		conn.Close()
	}
	<-h.done
	if err := h.Err(); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// openStream opens a stream on sess and writes the header for port.
func openStream(ctx context.Context, sess *yamux.Session, port uint32) (net.Conn, error) {
	type res struct {
		s   *yamux.Stream
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := sess.OpenStream()
		ch <- res{s, err}
	}()
	var s *yamux.Stream
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("opening serial link stream to port %d: %w", port, r.err)
		}
		s = r.s
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, fmt.Errorf("opening serial link stream to port %d: %w", port, ctx.Err())
	}
	if dl, ok := ctx.Deadline(); ok {
		s.SetWriteDeadline(dl)
	}
	if err := writeHeader(s, port); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening serial link stream to port %d: %w", port, err)
	}
	s.SetWriteDeadline(time.Time{})
	return streamConn{s}, nil
}
