package serialmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/yamux"

	"github.com/guestlink/guestlink/link/transport"
)

func init() {
	transport.Register("serial", func(arg string) (transport.Guest, error) {
		if arg == "" || arg != filepath.Base(arg) || arg == "." || arg == ".." {
			return nil, fmt.Errorf("%w: want serial:<virtio-serial port name>", transport.ErrBadSpec)
		}
		return NewGuest(arg), nil
	})
}

// DevicePath returns the guest path of the virtio-serial port name.
func DevicePath(name string) string { return filepath.Join("/dev/virtio-ports", name) }

// Guest is the agent's side of the serial link. It opens the port lazily,
// runs one session at a time over it, and starts a new session whenever the
// old one ends (the host disconnected, e.g. the daemon restarted).
type Guest struct {
	open func() (io.ReadWriteCloser, error)

	mu        sync.Mutex
	cond      *sync.Cond
	sess      *yamux.Session
	listeners map[uint32]*listener
	running   bool
	closed    bool
	stop      chan struct{}
}

var _ transport.Guest = (*Guest)(nil)

// NewGuest returns the link over the virtio-serial port name
// (/dev/virtio-ports/<name>).
func NewGuest(name string) *Guest {
	path := DevicePath(name)
	return NewGuestOpener(func() (io.ReadWriteCloser, error) {
		return os.OpenFile(path, os.O_RDWR, 0)
	})
}

// NewGuestOpener returns a link whose byte stream comes from open, called
// again for each new session (tests use a net.Pipe end).
func NewGuestOpener(open func() (io.ReadWriteCloser, error)) *Guest {
	g := &Guest{open: open, listeners: map[uint32]*listener{}, stop: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Kind returns "serial".
func (g *Guest) Kind() string { return "serial" }

// Listen accepts host streams targeting port.
func (g *Guest) Listen(port uint32) (net.Listener, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("listening on serial link port %d: %w", port, ErrClosed)
	}
	if g.listeners[port] != nil {
		return nil, fmt.Errorf("listening on serial link port %d: already listening", port)
	}
	l := &listener{g: g, port: port, ch: make(chan net.Conn), done: make(chan struct{})}
	g.listeners[port] = l
	g.startLocked()
	return l, nil
}

// Dial opens a stream to the host's port; cid is ignored. It waits for a
// session while ctx allows.
func (g *Guest) Dial(ctx context.Context, _ uint32, port uint32) (net.Conn, error) {
	sess, err := g.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("dialing serial link port %d: %w", port, err)
	}
	return openStream(ctx, sess, port)
}

// Close stops the link: listeners and the session end.
func (g *Guest) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.stop)
	sess := g.sess
	ls := g.listeners
	g.listeners = map[uint32]*listener{}
	g.cond.Broadcast()
	g.mu.Unlock()
	for _, l := range ls {
		l.closeOnce()
	}
	if sess != nil {
		sess.Close()
	}
	return nil
}

// session returns the live session, starting the link if needed.
func (g *Guest) session(ctx context.Context) (*yamux.Session, error) {
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.startLocked()
	for {
		if g.closed {
			return nil, ErrClosed
		}
		if g.sess != nil && !g.sess.IsClosed() {
			return g.sess, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g.cond.Wait()
	}
}

func (g *Guest) startLocked() {
	if !g.running && !g.closed {
		g.running = true
		go g.run()
	}
}

// run keeps a session up until Close. Between sessions it waits 50 ms,
// doubling up to 2 s, without jitter; a session that lasted over 5 s starts
// the waits over.
func (g *Guest) run() {
	bo := &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, Multiplier: 2, MaxInterval: 2 * time.Second}
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		began := time.Now()
		err := g.serveOne()
		if errors.Is(err, ErrClosed) {
			return
		}
		if time.Since(began) > 5*time.Second {
			bo.Reset()
		}
		select {
		case <-g.stop:
			return
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// serveOne opens the port, runs one session and dispatches host streams
// until the session ends.
func (g *Guest) serveOne() error {
	raw, err := g.open()
	if err != nil {
		return err
	}
	stopClose := make(chan struct{})
	defer close(stopClose)
	go func() { // Close must interrupt a handshake blocked in a read
		select {
		case <-g.stop:
			raw.Close()
		case <-stopClose:
		}
	}()
	rwc, err := guestSync(raw)
	if err != nil {
		raw.Close()
		return err
	}
	sess, err := yamux.Server(rwc, yamuxConfig())
	if err != nil {
		rwc.Close()
		return err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		sess.Close()
		return ErrClosed
	}
	g.sess = sess
	g.cond.Broadcast()
	g.mu.Unlock()
	defer func() {
		sess.Close()
		g.mu.Lock()
		if g.sess == sess {
			g.sess = nil
		}
		g.mu.Unlock()
	}()
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			return err
		}
		go g.dispatch(s)
	}
}

// dispatch reads a host stream's header and hands it to its port's listener.
func (g *Guest) dispatch(s *yamux.Stream) {
	port, ok := streamPort(s)
	if !ok {
		return
	}
	g.mu.Lock()
	l := g.listeners[port]
	g.mu.Unlock()
	if l == nil {
		s.Close()
		return
	}
	select {
	case l.ch <- streamConn{s}:
	case <-l.done:
		s.Close()
	}
}

// listener is a Listen result.
type listener struct {
	g    *Guest
	port uint32
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

var _ net.Listener = (*listener)(nil)

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("accepting on serial link port %d: %w", l.port, net.ErrClosed)
	}
}

func (l *listener) closeOnce() { l.once.Do(func() { close(l.done) }) }

func (l *listener) Close() error {
	l.g.mu.Lock()
	if l.g.listeners[l.port] == l {
		delete(l.g.listeners, l.port)
	}
	l.g.mu.Unlock()
	l.closeOnce()
	return nil
}

func (l *listener) Addr() net.Addr { return Addr{Port: l.port} }

// Addr is the address of a serial link listener.
type Addr struct{ Port uint32 }

// Network returns "serial".
func (Addr) Network() string { return "serial" }

// String returns "serial:<port>".
func (a Addr) String() string { return fmt.Sprintf("serial:%d", a.Port) }
