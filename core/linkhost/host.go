package linkhost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/core/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/link/unixsock"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// AgentPort is the link port the agent listens on inside the guest.
const AgentPort = 8443

// HostCID is the vsock context ID of the host.
const HostCID = 2

// The range the daemon's link port is picked from.
const (
	MinPort = 1024
	MaxPort = 65534
)

// portTries is how many random ports are tried before giving up.
const portTries = 64

// serialOpenTimeout bounds connecting to a serial link's chardev socket.
const serialOpenTimeout = 10 * time.Second

// DefaultMaxConnsPerInstance is the default of Config.MaxConnsPerInstance:
// above the 1,000 concurrent devlxd connections one guest must be able to
// hold, well below the daemon's file descriptor limit.
const DefaultMaxConnsPerInstance = 1024

// Backoff of an accept loop after a temporary error (such as EMFILE).
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// VsockListenFunc listens for vsock connections on the host CID at port.
type VsockListenFunc func(port uint32) (net.Listener, error)

// VsockDialFunc connects to a guest's vsock port.
type VsockDialFunc func(ctx context.Context, cid, port uint32) (net.Conn, error)

// SerialTransport opens multiplexed sessions over a guest's serial link
// channel. The default is link/serialmux over QEMU's Unix-socket chardev.
type SerialTransport interface {
	// Open connects to the channel at path (sdk.LinkEndpoint.Path) and
	// returns its session. The session lives until closed or the guest
	// goes away.
	Open(ctx context.Context, path string) (SerialSession, error)
}

// SerialSession is one guest's serial link: streams in both directions.
type SerialSession interface {
	// Accept returns the next stream the guest opened towards the daemon.
	Accept() (net.Conn, error)
	// Dial opens a stream to the guest's port (AgentPort).
	Dial(ctx context.Context, port uint32) (net.Conn, error)
	// Close ends the session and its streams.
	Close() error
}

// serialMux is the default SerialTransport: link/serialmux sessions that
// keep the streams for the daemon's link port and close the others (an
// agent still using a previous daemon's port).
type serialMux struct {
	port   uint32
	logger *slog.Logger
}

func (t serialMux) Open(ctx context.Context, path string) (SerialSession, error) {
	h, err := serialmux.DialHost(ctx, path)
	if err != nil {
		return nil, err
	}
	return &serialMuxSession{Host: h, port: t.port, logger: t.logger}, nil
}

type serialMuxSession struct {
	*serialmux.Host
	port   uint32
	logger *slog.Logger
}

// Accept returns the next stream for the daemon's port.
func (s *serialMuxSession) Accept() (net.Conn, error) {
	for {
		c, port, err := s.Host.Accept()
		if err != nil {
			return nil, err
		}
		if port == s.port {
			return c, nil
		}
		s.logger.Debug("linkhost: serial stream for another port", "port", port, "want", s.port)
		c.Close()
	}
}

// Config configures a Host. The zero value works: vsock when
// /dev/vhost-vsock exists, hybrid and serial links always.
type Config struct {
	// VsockDevice is the device whose presence enables the vsock listener
	// (default "/dev/vhost-vsock").
	VsockDevice string
	// DisableVsock turns the vsock listener off whatever the device.
	DisableVsock bool
	// ListenVsock listens on the host CID (default: mdlayher/vsock on
	// HostCID). Tests replace it.
	ListenVsock VsockListenFunc
	// DialVsock dials a guest CID (default: mdlayher/vsock).
	DialVsock VsockDialFunc
	// Serial carries serial links (default link/serialmux).
	Serial SerialTransport
	// Logger receives link errors (default slog.Default).
	Logger *slog.Logger
	// MaxConnsPerInstance caps the link connections one instance holds open
	// at once, over all its links, so one guest cannot exhaust the daemon's
	// file descriptors: a connection over the cap is closed as soon as it
	// is accepted. Zero or less means DefaultMaxConnsPerInstance.
	MaxConnsPerInstance int
}

// Host is the host side of all guest links. It is a net.Listener: Accept
// returns the connections of every link, each a *Conn tied to its instance.
// Attach and Detach follow the guests' lives.
type Host struct {
	cfg   Config
	port  uint32
	vsock net.Listener // nil when vsock is off

	conns  chan *Conn
	done   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup

	opMu     sync.Mutex             // serialises Attach and Detach
	mu       sync.Mutex             // guards attached and byCID
	attached map[string]*attachment // by instance UUID
	byCID    map[uint32]string      // vsock guest CID -> instance UUID
}

// attachment is one running instance's link.
type attachment struct {
	uuid    string
	ep      sdk.LinkEndpoint
	ln      net.Listener  // hybrid: the instance's socket
	path    string        // hybrid: the socket path
	session SerialSession // serial
	done    chan struct{}
	failed  chan struct{} // closed when the accept loop stopped on an error

	live    atomic.Int64 // connections handed on and not yet closed
	overCap atomic.Bool  // the last connection was refused by the cap
}

// dead reports whether the attachment's accept loop stopped on an error, so
// the link no longer takes connections.
func (a *attachment) dead() bool {
	select {
	case <-a.failed:
		return true
	default:
		return false
	}
}

// New picks the daemon's link port (random in MinPort..MaxPort, new at every
// start) and, when vsock is available, listens on it.
func New(cfg Config) (*Host, error) {
	if cfg.VsockDevice == "" {
		cfg.VsockDevice = VhostVsockDevice
	}
	if cfg.ListenVsock == nil {
		cfg.ListenVsock = func(port uint32) (net.Listener, error) {
			return vsock.ListenContextID(HostCID, port, nil)
		}
	}
	if cfg.DialVsock == nil {
		cfg.DialVsock = func(ctx context.Context, cid, port uint32) (net.Conn, error) {
			return vsock.DialContext(ctx, cid, port, nil)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxConnsPerInstance <= 0 {
		cfg.MaxConnsPerInstance = DefaultMaxConnsPerInstance
	}
	h := &Host{
		cfg:      cfg,
		conns:    make(chan *Conn),
		done:     make(chan struct{}),
		attached: map[string]*attachment{},
		byCID:    map[uint32]string{},
	}
	if !cfg.DisableVsock && deviceExists(cfg.VsockDevice) {
		port, ln, err := listenRandom(cfg.ListenVsock, randomPort)
		if err != nil {
			// The hybrid and serial links still work.
			cfg.Logger.Warn("linkhost: vsock unavailable, continuing without it", "device", cfg.VsockDevice, "err", err)
		} else {
			h.port, h.vsock = port, ln
			h.wg.Add(1)
			go h.acceptVsock()
		}
	}
	if h.port == 0 {
		h.port = randomPort()
	}
	if h.cfg.Serial == nil {
		h.cfg.Serial = serialMux{port: h.port, logger: cfg.Logger}
	}
	return h, nil
}

func deviceExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func randomPort() uint32 {
	return uint32(MinPort + rand.IntN(MaxPort-MinPort+1))
}

// listenRandom listens on random ports from pick until one is free.
func listenRandom(listen VsockListenFunc, pick func() uint32) (uint32, net.Listener, error) {
	var err error
	for range portTries {
		port := pick()
		var ln net.Listener
		ln, err = listen(port)
		if err == nil {
			return port, ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, nil, fmt.Errorf("listening on vsock port %d: %w", port, err)
		}
	}
	return 0, nil, fmt.Errorf("listening on vsock: no free port in %d tries: %w", portTries, err)
}

// Port returns the daemon's link port: the vsock port, and the suffix of
// the hybrid sockets.
func (h *Host) Port() uint32 { return h.port }

// Vsock reports whether the vsock listener runs.
func (h *Host) Vsock() bool { return h.vsock != nil }

// Accept returns the next connection of any link, a *Conn naming its
// instance. It fails with net.ErrClosed once the Host is closed.
func (h *Host) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Addr names the link listener.
func (h *Host) Addr() net.Addr { return hostAddr{port: h.port} }

type hostAddr struct{ port uint32 }

func (hostAddr) Network() string  { return "guest-link" }
func (a hostAddr) String() string { return fmt.Sprintf("guest-link:%d", a.port) }

// Close detaches every instance, stops the vsock listener and makes Accept
// fail. Connections already handed on are left to their owners.
func (h *Host) Close() error {
	h.closed.Do(func() {
		close(h.done)
		if h.vsock != nil {
			h.vsock.Close()
		}
		h.mu.Lock()
		atts := make([]*attachment, 0, len(h.attached))
		for _, a := range h.attached {
			atts = append(atts, a)
		}
		h.mu.Unlock()
		for _, a := range atts {
			h.Detach(a.uuid)
		}
	})
	h.wg.Wait()
	return nil
}

// Attach starts serving the link of a running instance: for a hybrid link it
// listens on hybrid.HostPath(ep.Path, Port()) (mode 0600); for vsock it maps
// the guest CID to the instance; for serial it opens the session. Attaching
// again with the same endpoint does nothing; with another endpoint it
// replaces the old link; a link that stopped accepting on an error is
// re-created. A link kind the host cannot serve is
// errdefs.ErrNotSupported.
func (h *Host) Attach(uuid string, ep *sdk.LinkEndpoint) error {
	if uuid == "" || ep == nil {
		return fmt.Errorf("attaching link: instance and endpoint are required: %w", errdefs.ErrInvalid)
	}
	h.opMu.Lock()
	defer h.opMu.Unlock()
	select {
	case <-h.done:
		return fmt.Errorf("attaching link of instance %s: %w", uuid, net.ErrClosed)
	default:
	}
	h.mu.Lock()
	old := h.attached[uuid]
	h.mu.Unlock()
	if old != nil {
		if old.ep == *ep && !old.dead() {
			return nil
		}
		h.detach(uuid)
	}
	a := &attachment{uuid: uuid, ep: *ep, done: make(chan struct{}), failed: make(chan struct{})}
	id := Identity{InstanceUUID: uuid, Link: ep.Kind}
	switch ep.Kind {
	case sdk.LinkHybrid:
		if ep.Path == "" {
			return fmt.Errorf("attaching hybrid link of instance %s: empty socket path: %w", uuid, errdefs.ErrInvalid)
		}
		a.path = hybrid.HostPath(ep.Path, h.port)
		ln, err := listenUnix(a.path)
		if err != nil {
			return fmt.Errorf("attaching hybrid link of instance %s: %w", uuid, err)
		}
		a.ln = ln
		h.wg.Add(1)
		go h.acceptFrom(a, ln.Accept, id)
	case sdk.LinkVsock:
		if h.vsock == nil {
			return fmt.Errorf("attaching vsock link of instance %s: %w", uuid, errdefs.ErrNotSupported)
		}
		if ep.CID < 3 || ep.CID == 0xffffffff {
			return fmt.Errorf("attaching vsock link of instance %s: guest CID %d: %w", uuid, ep.CID, errdefs.ErrInvalid)
		}
	case sdk.LinkSerial:
		ctx, cancel := context.WithTimeout(context.Background(), serialOpenTimeout)
		s, err := h.cfg.Serial.Open(ctx, ep.Path)
		cancel()
		if err != nil {
			return fmt.Errorf("attaching serial link of instance %s: %w", uuid, err)
		}
		a.session = s
		h.wg.Add(1)
		go h.acceptFrom(a, s.Accept, id)
	default:
		return fmt.Errorf("attaching link of instance %s: link kind %q: %w", uuid, ep.Kind, errdefs.ErrNotSupported)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.byCID[ep.CID]; ep.Kind == sdk.LinkVsock && cur != "" && cur != uuid {
		a.close()
		return fmt.Errorf("attaching vsock link of instance %s: CID %d belongs to instance %s: %w", uuid, ep.CID, cur, errdefs.ErrConflict)
	}
	if ep.Kind == sdk.LinkVsock {
		h.byCID[ep.CID] = uuid
	}
	h.attached[uuid] = a
	return nil
}

// Detach stops serving the instance's link (its hybrid socket is closed and
// removed). Detaching an instance that is not attached does nothing.
func (h *Host) Detach(uuid string) {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	h.detach(uuid)
}

func (h *Host) detach(uuid string) {
	h.mu.Lock()
	a := h.attached[uuid]
	delete(h.attached, uuid)
	if a != nil && a.ep.Kind == sdk.LinkVsock && h.byCID[a.ep.CID] == uuid {
		delete(h.byCID, a.ep.CID)
	}
	h.mu.Unlock()
	if a != nil {
		a.close()
	}
}

func (a *attachment) close() {
	close(a.done)
	if a.ln != nil {
		a.ln.Close() // a Unix listener removes its socket file
	}
	if a.session != nil {
		a.session.Close()
	}
}

// Endpoint returns the endpoint an instance is attached with.
func (h *Host) Endpoint(uuid string) (sdk.LinkEndpoint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.attached[uuid]
	if !ok {
		return sdk.LinkEndpoint{}, false
	}
	return a.ep, true
}

// DialAgent connects to the agent's link port of an attached instance. The
// connection is raw: the caller speaks TLS over it. An instance that is not
// attached is errdefs.ErrUnavailable.
func (h *Host) DialAgent(ctx context.Context, uuid string) (net.Conn, error) {
	h.mu.Lock()
	a := h.attached[uuid]
	h.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("dialing agent of instance %s: no link attached: %w", uuid, errdefs.ErrUnavailable)
	}
	var (
		c   net.Conn
		err error
	)
	switch a.ep.Kind {
	case sdk.LinkHybrid:
		c, err = hybrid.Dial(ctx, a.ep.Path, AgentPort)
	case sdk.LinkVsock:
		c, err = h.cfg.DialVsock(ctx, a.ep.CID, AgentPort)
	case sdk.LinkSerial:
		c, err = a.session.Dial(ctx, AgentPort)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing agent of instance %s over %s: %w", uuid, a.ep.Kind, err)
	}
	return c, nil
}

// listenUnix listens on path with mode 0600, replacing a stale socket file
// (left by a daemon that died) but nothing else.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listening on %q: a file that is not a socket is in the way: %w", path, errdefs.ErrConflict)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %q: %w", path, err)
		}
	}
	ln, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// acceptFrom hands every connection accept returns on, tied to id, until
// the attachment ends or accept fails for good. After a temporary error
// (EMFILE and the like) it backs off and retries; after any other it marks
// the attachment failed, so the next Attach re-creates it.
func (h *Host) acceptFrom(a *attachment, accept func() (net.Conn, error), id Identity) {
	defer h.wg.Done()
	bo := acceptBackoff()
	for {
		c, err := accept()
		if err != nil {
			select {
			case <-a.done:
				return
			case <-h.done:
				return
			default:
			}
			if temporary(err) {
				delay := bo.NextBackOff()
				h.cfg.Logger.Debug("linkhost: temporary accept error, retrying", "instance", id.InstanceUUID, "link", id.Link, "err", err, "in", delay)
				if !h.sleep(delay, a.done) {
					return
				}
				continue
			}
			h.cfg.Logger.Warn("linkhost: link stopped accepting", "instance", id.InstanceUUID, "link", id.Link, "err", err)
			close(a.failed)
			return
		}
		bo.Reset()
		h.admit(a, c, id)
	}
}

// acceptVsock accepts on the vsock listener and ties each connection to the
// instance its peer CID was attached with; others are closed. Temporary
// errors are retried with backoff: the listener serves every guest.
func (h *Host) acceptVsock() {
	defer h.wg.Done()
	bo := acceptBackoff()
	for {
		c, err := h.vsock.Accept()
		if err != nil {
			select {
			case <-h.done:
				return
			default:
			}
			if temporary(err) {
				delay := bo.NextBackOff()
				h.cfg.Logger.Debug("linkhost: temporary vsock accept error, retrying", "err", err, "in", delay)
				if !h.sleep(delay, nil) {
					return
				}
				continue
			}
			h.cfg.Logger.Error("linkhost: vsock listener failed", "err", err)
			return
		}
		bo.Reset()
		addr, ok := c.RemoteAddr().(*vsock.Addr)
		h.mu.Lock()
		var a *attachment
		if ok {
			a = h.attached[h.byCID[addr.ContextID]]
		}
		h.mu.Unlock()
		if a == nil {
			h.cfg.Logger.Warn("linkhost: vsock connection from an unknown guest", "peer", c.RemoteAddr())
			c.Close()
			continue
		}
		h.admit(a, c, Identity{InstanceUUID: a.uuid, Link: sdk.LinkVsock})
	}
}

// admit hands c on tied to id, unless the instance already holds
// Config.MaxConnsPerInstance connections: then c is closed at once, and the
// first refusal of a burst is logged.
func (h *Host) admit(a *attachment, c net.Conn, id Identity) {
	if a.live.Add(1) > int64(h.cfg.MaxConnsPerInstance) {
		a.live.Add(-1)
		c.Close()
		if !a.overCap.Swap(true) {
			h.cfg.Logger.Warn("linkhost: instance holds too many link connections, closing new ones", "instance", id.InstanceUUID, "link", id.Link, "max", h.cfg.MaxConnsPerInstance)
		}
		return
	}
	a.overCap.Store(false)
	lc := WithIdentity(c, id)
	lc.release = func() { a.live.Add(-1) }
	h.hand(lc, a.done)
}

// temporary reports whether an accept error may go away by itself (out of
// file descriptors or memory, an aborted or interrupted accept, a timeout).
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// acceptBackoff returns the waits between accepts after temporary errors:
// minAcceptBackoff doubling up to maxAcceptBackoff (5 ms, 10 ms, ... 1 s),
// without jitter; Reset after a successful accept starts over.
func acceptBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: minAcceptBackoff, Multiplier: 2, MaxInterval: maxAcceptBackoff}
}

// sleep waits d, and reports false when the Host closed or stop was closed
// first.
func (h *Host) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-h.done:
		return false
	}
}

// hand passes c to Accept, or closes it when nobody will take it.
func (h *Host) hand(c *Conn, detached <-chan struct{}) {
	select {
	case h.conns <- c:
	case <-detached:
		c.Close()
	case <-h.done:
		c.Close()
	}
}

var (
	_ net.Listener    = (*Host)(nil)
	_ SerialSession   = (*serialMuxSession)(nil)
	_ SerialTransport = serialMux{}
)
