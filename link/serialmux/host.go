package serialmux

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// Host is the daemon's side of one guest's serial link. A Host lives as long
// as its connection to the chardev socket; after Done is closed make a new
// one (DialHost again).
type Host struct {
	sess *yamux.Session
}

// DialHost connects to the guest's chardev Unix socket at path (the
// LinkEndpoint's Path) and starts a session over it. It returns once the
// guest's side answered the handshake, so it waits (while ctx allows) until
// the agent runs; give it a deadline and retry. QEMU serves one connection
// per chardev at a time: keep one Host per guest and dial again after Done.
func DialHost(ctx context.Context, path string) (*Host, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to serial link %q: %w", path, err)
	}
	return NewHost(ctx, conn)
}

// NewHost starts the host side of a session over conn, which it owns: it
// synchronises with the guest (see sync.go), waiting while ctx allows, and
// starts the session.
func NewHost(ctx context.Context, conn io.ReadWriteCloser) (*Host, error) {
	rwc, err := hostSync(ctx, conn)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(rwc, yamuxConfig())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting serial link session: %w", err)
	}
	return &Host{sess: sess}, nil
}

// Dial opens a stream to the guest's port (the agent listens on 8443).
func (h *Host) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	return openStream(ctx, h.sess, port)
}

// Accept waits for a stream the guest opened and returns it with the port it
// targets (the daemon's advertised link port). Streams with a bad header are
// closed and skipped.
func (h *Host) Accept() (net.Conn, uint32, error) {
	for {
		s, err := h.sess.AcceptStream()
		if err != nil {
			return nil, 0, fmt.Errorf("accepting serial link stream: %w: %w", ErrClosed, err)
		}
		s.SetReadDeadline(time.Now().Add(headerTimeout))
		port, err := readHeader(s)
		if err != nil {
			s.Close()
			continue
		}
		s.SetReadDeadline(time.Time{})
		return s, port, nil
	}
}

// Done returns a channel closed when the session ended.
func (h *Host) Done() <-chan struct{} { return h.sess.CloseChan() }

// Close ends the session and its streams.
func (h *Host) Close() error { return h.sess.Close() }

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
	return s, nil
}
