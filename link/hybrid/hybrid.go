// Package hybrid implements Firecracker-style hybrid vsock over Unix sockets.
//
// Host to guest: the host connects to the VMM's Unix socket, writes
// "CONNECT <port>\n" and reads "OK <n>\n" (EOF means nothing listens on that
// port in the guest); the stream then belongs to the guest's listener.
// Guest to host: the guest connects to vsock port P and the VMM forwards it
// to the host's Unix socket "<uds>_<P>" (see HostPath).
//
// Dial is the host-side dialer. Listen is the acceptor of the VMM socket,
// used by a guest that owns it (in the simulated backend the agent listens on
// the VMM socket itself).
package hybrid

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/guestlink/guestlink/link/unixsock"
)

// MaxLine is the longest handshake line accepted, newline included.
const MaxLine = 32

// HandshakeTimeout bounds each side of the handshake when the context has no
// earlier deadline.
const HandshakeTimeout = 5 * time.Second

// Sentinel errors of the handshake.
var (
	// ErrNotListening is returned by Dial when the guest side closed the
	// connection without answering: nothing listens on that port.
	ErrNotListening = errors.New("hybrid vsock port not listening")
	// ErrBadHandshake is returned for a malformed CONNECT or OK line.
	ErrBadHandshake = errors.New("malformed hybrid vsock handshake")
)

// HostPath returns the Unix socket path where the host listens for guest
// connections to vsock port port: udsPath + "_" + port.
func HostPath(udsPath string, port uint32) string {
	return udsPath + "_" + strconv.FormatUint(uint64(port), 10)
}

// FormatConnect returns the handshake request "CONNECT <port>\n".
func FormatConnect(port uint32) []byte {
	return []byte("CONNECT " + strconv.FormatUint(uint64(port), 10) + "\n")
}

// FormatOK returns the handshake answer "OK <n>\n".
func FormatOK(n uint32) []byte {
	return []byte("OK " + strconv.FormatUint(uint64(n), 10) + "\n")
}

// ParseConnect parses a "CONNECT <port>\n" line (newline included) and
// returns the port. Errors wrap ErrBadHandshake.
func ParseConnect(line []byte) (uint32, error) {
	return parseLine(line, "CONNECT ")
}

// ParseOK parses an "OK <n>\n" line (newline included) and returns n. Errors
// wrap ErrBadHandshake.
func ParseOK(line []byte) (uint32, error) {
	return parseLine(line, "OK ")
}

func parseLine(line []byte, prefix string) (uint32, error) {
	s := string(line)
	if len(s) > MaxLine {
		return 0, fmt.Errorf("%w: line longer than %d bytes", ErrBadHandshake, MaxLine)
	}
	if len(s) < len(prefix)+2 || s[:len(prefix)] != prefix || s[len(s)-1] != '\n' {
		return 0, fmt.Errorf("%w: want %q<decimal>\\n, got %q", ErrBadHandshake, prefix, s)
	}
	digits := s[len(prefix) : len(s)-1]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, fmt.Errorf("%w: want %q<decimal>\\n, got %q", ErrBadHandshake, prefix, s)
		}
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: number %q: %w", ErrBadHandshake, digits, err)
	}
	return uint32(n), nil
}

// readLine reads one newline-terminated line of at most MaxLine bytes, one
// byte at a time so that nothing after the newline is consumed.
func readLine(r io.Reader) ([]byte, error) {
	line := make([]byte, 0, MaxLine)
	var b [1]byte
	for len(line) < MaxLine {
		n, err := r.Read(b[:])
		if n == 1 {
			line = append(line, b[0])
			if b[0] == '\n' {
				return line, nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return line, io.ErrUnexpectedEOF
			}
			return line, err
		}
	}
	return line, fmt.Errorf("%w: no newline within %d bytes", ErrBadHandshake, MaxLine)
}

// Dial connects to the VMM socket udsPath and asks for guest vsock port
// port. The handshake honours ctx and is bounded by HandshakeTimeout.
func Dial(ctx context.Context, udsPath string, port uint32) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", udsPath)
	if err != nil {
		return nil, fmt.Errorf("dialing hybrid vsock %s port %d: %w", udsPath, port, err)
	}
	if err := handshake(ctx, conn, port); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dialing hybrid vsock %s port %d: %w", udsPath, port, err)
	}
	return conn, nil
}

func handshake(ctx context.Context, conn net.Conn, port uint32) error {
	deadline := time.Now().Add(HandshakeTimeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("setting handshake deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(FormatConnect(port)); err != nil {
		return fmt.Errorf("writing CONNECT: %w", err)
	}
	line, err := readLine(conn)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && len(line) == 0:
		return ErrNotListening
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: connection closed after %q", ErrBadHandshake, line)
	case err != nil:
		if ctx.Err() != nil {
			return fmt.Errorf("reading OK: %w", ctx.Err())
		}
		var ne net.Error
		if ctxDeadline && errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("reading OK: %w", context.DeadlineExceeded)
		}
		return fmt.Errorf("reading OK: %w", err)
	}
	if _, err := ParseOK(line); err != nil {
		return err
	}
	if !stop() {
		return fmt.Errorf("reading OK: %w", ctx.Err())
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("clearing handshake deadline: %w", err)
	}
	return nil
}

// Listener accepts hybrid vsock connections on a VMM Unix socket and hands
// them to per-port listeners. Connections for ports nobody serves are
// closed without an answer, which the dialer sees as ErrNotListening.
type Listener struct {
	uds  net.Listener
	path string

	mu    sync.Mutex
	ports map[uint32]*portListener
	next  uint32
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// Listen listens on the Unix socket udsPath (mode 0600) and starts
// accepting.
func Listen(udsPath string) (*Listener, error) {
	uds, err := unixsock.Listen(udsPath, 0o600)
	if err != nil {
		return nil, fmt.Errorf("listening on hybrid vsock: %w", err)
	}
	l := &Listener{
		uds:   uds,
		path:  udsPath,
		ports: make(map[uint32]*portListener),
		next:  1 << 30,
		done:  make(chan struct{}),
	}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Path returns the Unix socket path the listener is bound to.
func (l *Listener) Path() string { return l.path }

func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		conn, err := l.uds.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.route(conn)
		}()
	}
}

// route reads the CONNECT line of conn and hands it to the port's listener.
func (l *Listener) route(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(HandshakeTimeout))
	line, err := readLine(conn)
	if err != nil {
		conn.Close()
		return
	}
	port, err := ParseConnect(line)
	if err != nil {
		conn.Close()
		return
	}
	l.mu.Lock()
	pl := l.ports[port]
	n := l.next
	l.next++
	l.mu.Unlock()
	if pl == nil {
		conn.Close()
		return
	}
	if _, err := conn.Write(FormatOK(n)); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	select {
	case pl.conns <- conn:
	case <-pl.done:
		conn.Close()
	case <-l.done:
		conn.Close()
	}
}

// Port returns a listener for guest vsock port p. Connections for p are
// answered "OK <n>" only while it is open; closing it stops serving p.
// Asking again for a port that is being served returns the same listener.
func (l *Listener) Port(p uint32) net.Listener {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pl, ok := l.ports[p]; ok {
		return pl
	}
	pl := &portListener{
		parent: l,
		port:   p,
		conns:  make(chan net.Conn),
		done:   make(chan struct{}),
	}
	select {
	case <-l.done:
		close(pl.done)
	default:
		l.ports[p] = pl
	}
	return pl
}

// Close stops accepting, closes every port listener and waits for the
// handshakes in flight. Connections already accepted are left open.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.uds.Close()
		l.mu.Lock()
		for p, pl := range l.ports {
			pl.closeOnce.Do(func() { close(pl.done) })
			delete(l.ports, p)
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("closing hybrid vsock %s: %w", l.path, err)
	}
	return nil
}

// Addr is the address of a per-port listener.
type Addr struct {
	// Path is the VMM Unix socket.
	Path string
	// Port is the vsock port.
	Port uint32
}

// Network returns "hybrid-vsock".
func (a *Addr) Network() string { return "hybrid-vsock" }

// String returns "<path>:<port>".
func (a *Addr) String() string { return a.Path + ":" + strconv.FormatUint(uint64(a.Port), 10) }

type portListener struct {
	parent    *Listener
	port      uint32
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

var _ net.Listener = (*portListener)(nil)

func (pl *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-pl.conns:
		return c, nil
	case <-pl.done:
		return nil, fmt.Errorf("accepting on %s: %w", pl.Addr(), net.ErrClosed)
	}
}

func (pl *portListener) Close() error {
	pl.parent.mu.Lock()
	if pl.parent.ports[pl.port] == pl {
		delete(pl.parent.ports, pl.port)
	}
	pl.parent.mu.Unlock()
	pl.closeOnce.Do(func() { close(pl.done) })
	return nil
}

func (pl *portListener) Addr() net.Addr { return &Addr{Path: pl.parent.path, Port: pl.port} }
