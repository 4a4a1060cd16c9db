package linkhost

import (
	"context"
	"fmt"
	"github.com/guestlink/guestlink/internal/keylock"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"

	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/sdnotify"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// AgentPort is the link port the agent listens on inside the guest.
const AgentPort = 8443

// The range the daemon's link port is picked from.
const (
	MinPort = 1024
	MaxPort = 65534
)

// DefaultMaxConnsPerInstance is the default of Config.MaxConnsPerInstance:
// above the 1,000 concurrent devlxd connections one guest must be able to
// hold, well below the daemon's file descriptor limit.
const DefaultMaxConnsPerInstance = 1024

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
	// Observer is told of every link connection accepted or refused
	// (core/metrics counts them); nil observes nothing.
	Observer ConnObserver
	// MaxDescriptors bounds the descriptors the Host holds for hybrid
	// links at once: each running instance's listener and each connection
	// accepted on one. Past it a connection stays in its listener's
	// backlog (held by the kernel, the guest's connect succeeded) until a
	// descriptor is released, instead of the daemon running out of
	// descriptors with thousands of guests connecting at once. Listeners
	// always count: a running guest's link is served even over the bound
	// (logged). Zero or less is no bound; the daemon derives it from its
	// open-file limit.
	MaxDescriptors int
	// Notify receives the systemd notifications (READY=1 and the like,
	// link/sdnotify) a guest with a vsock device sends to the host's
	// port sdnotify.Port: on the user-space device's socket
	// <path>_8442 of each attached vsock link, and on the kernel's vsock
	// when its listener runs. Nil listens for none.
	Notify NotifyHandler
}

// Host is the host side of all guest links. It is a net.Listener: Accept
// returns the connections of every link, each a *Conn tied to its instance.
// Attach and Detach follow the guests' lives.
type Host struct {
	cfg   Config
	port  uint32
	vsock net.Listener // nil when vsock is off
	// vsockNotify is the notification port on the kernel's vsock (nil
	// without vsock, Config.Notify or the port).
	vsockNotify net.Listener

	conns  chan *Conn
	done   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup

	// opMu is held for reading by Attach and Detach and for writing by
	// Close. Attach and Detach of one instance are serialised by its
	// entry in ops, those of distinct instances run at once: a restarted
	// daemon attaches every running guest's link from its recovery
	// workers, and one host-wide lock held across each link's socket
	// (or a serial session's open) made them wait on each other (200
	// fleet guests: 48 of the 64 workers waiting here).
	opMu     sync.RWMutex
	mu       sync.Mutex             // guards attached and byCID
	attached map[string]*attachment // by instance UUID
	byCID    map[uint32]string      // vsock guest CID -> instance UUID
	ops      keylock.Map            // Attach and Detach under way, one at a time by instance UUID

	fds    *fdBudget   // hybrid listeners and their connections
	gateMu sync.Mutex  // guards the gate's start (startGate)
	gate   *acceptGate // accepts on the hybrid links; made by the first (startGate)

	closeGate  sync.Once
	gateFailed bool // no epoll: hybrid links accept from goroutines
}

// attachment is one running instance's link.
type attachment struct {
	uuid    string
	ep      contract.LinkEndpoint
	ln      net.Listener // hybrid: the instance's socket
	lnFD    bool         // ln counts in Host.fds
	gated   bool         // ln is watched by Host.gate as gateFD
	gateFD  int32
	path    string        // hybrid: the socket path
	session SerialSession // serial
	done    chan struct{}
	failed  chan struct{} // closed when the accept loop stopped on an error

	notifyLn net.Listener  // a user-space device's notification socket
	notify   *notifyLimits // the instance's budget of notifications

	live    atomic.Int64 // connections handed on and not yet closed
	overCap atomic.Bool  // the last connection was refused by the cap

	// conns are the connections handed on and not yet closed: a detached
	// link closes them (a kept-alive connection does not outlive its
	// guest's link).
	connsMu sync.Mutex
	conns   map[*Conn]struct{}
	gone    bool // closed: a connection handed on now is closed at once
}

// track adds c to the attachment's open connections; false when the
// attachment was closed (c must then be closed).
func (a *attachment) track(c *Conn) bool {
	a.connsMu.Lock()
	defer a.connsMu.Unlock()
	if a.gone {
		return false
	}
	if a.conns == nil {
		a.conns = map[*Conn]struct{}{}
	}
	a.conns[c] = struct{}{}
	return true
}

func (a *attachment) untrack(c *Conn) {
	a.connsMu.Lock()
	delete(a.conns, c)
	a.connsMu.Unlock()
}

// closeConns closes the attachment's open connections and every one it
// would be handed later.
func (a *attachment) closeConns() {
	a.connsMu.Lock()
	a.gone = true
	conns := a.conns
	a.conns = nil
	a.connsMu.Unlock()
	for c := range conns {
		c.Close()
	}
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
	if cfg.Observer == nil {
		cfg.Observer = noConnObserver{}
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
		fds:      newFDBudget(cfg.MaxDescriptors),
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
			h.listenVsockNotify()
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

// randomPort picks a link port: never the notification port, whose
// hybrid socket would be the link's.
func randomPort() uint32 {
	for {
		if p := uint32(MinPort + rand.IntN(MaxPort-MinPort+1)); p != sdnotify.Port {
			return p
		}
	}
}

// SetReclaim gives the Host a function that closes one idle kept-alive
// link connection and reports whether there was one (the devlxd server's
// CloseOldestIdle). When the hybrid links' descriptors (MaxDescriptors) are
// spent, a link that needs one (a new listener, a connection waiting in a
// backlog, a dial) has an idle connection closed for it instead of
// waiting: links come before kept connections. Nil removes it.
func (h *Host) SetReclaim(f func() bool) {
	if f == nil {
		h.fds.reclaim.Store(nil)
		return
	}
	h.fds.reclaim.Store(&f)
}

// Reclaimed returns how many idle connections were closed for a link's
// descriptor (SetReclaim).
func (h *Host) Reclaimed() uint64 { return h.fds.reclaimed.Load() }

// Port returns the daemon's link port: the vsock port, and the suffix of
// the hybrid sockets.
func (h *Host) Port() uint32 { return h.port }

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

// closeWorkers is how many links Close closes at once.
const closeWorkers = 16

// Close detaches every instance, stops the vsock listener and makes Accept
// fail. Connections already handed on are left to their owners.
func (h *Host) Close() error {
	h.closed.Do(func() {
		close(h.done)
		if h.vsock != nil {
			h.vsock.Close()
		}
		if h.vsockNotify != nil {
			h.vsockNotify.Close()
		}
		// No Attach or Detach runs meanwhile; later ones find the host
		// closed (Attach) or nothing attached (Detach).
		h.opMu.Lock()
		h.mu.Lock()
		atts := make([]*attachment, 0, len(h.attached))
		for _, a := range h.attached {
			atts = append(atts, a)
		}
		clear(h.attached)
		clear(h.byCID)
		h.mu.Unlock()
		// Closing a link unlinks its socket file in the guest's
		// directory: about a millisecond each on a loaded disk, 10 s for
		// 10,000 guests one after the other. Closed by a few workers,
		// links of distinct guests do not wait on each other.
		work := make(chan *attachment)
		var wg sync.WaitGroup
		for range min(closeWorkers, len(atts)) {
			wg.Go(func() {
				for a := range work {
					a.close(h)
				}
			})
		}
		for _, a := range atts {
			work <- a
		}
		close(work)
		wg.Wait()
		h.opMu.Unlock()
	})
	h.wg.Wait()
	if h.gate != nil {
		h.closeGate.Do(h.gate.close)
	}
	return nil
}

// Attach starts serving the link of a running instance: for a hybrid link it
// listens on hybrid.HostPath(ep.Path, Port()) (mode 0600); for vsock it maps
// the guest CID to the instance; for serial it opens the session. Attaching
// again with the same endpoint does nothing; with another endpoint it
// replaces the old link; a link that stopped accepting on an error is
// re-created. A link kind the host cannot serve is
// errdefs.ErrNotSupported.
func (h *Host) Attach(uuid string, ep *contract.LinkEndpoint) error {
	if uuid == "" || ep == nil {
		return fmt.Errorf("attaching link: instance and endpoint are required: %w", errdefs.ErrInvalid)
	}
	h.opMu.RLock()
	defer h.opMu.RUnlock()
	defer h.lockInstance(uuid)()
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
	a := &attachment{uuid: uuid, ep: *ep, done: make(chan struct{}), failed: make(chan struct{}), notify: newNotifyLimits()}
	var err error
	switch ep.Kind {
	case contract.LinkHybrid:
		err = h.attachHybrid(a)
	case contract.LinkVsock:
		if ep.Path != "" { // vsock served by a user-space device: see viaHybrid
			err = h.attachHybrid(a)
		} else {
			err = h.attachVsock(a)
		}
	case contract.LinkSerial:
		err = h.attachSerial(a)
	default:
		err = fmt.Errorf("attaching link of instance %s: link kind %q: %w", uuid, ep.Kind, errdefs.ErrNotSupported)
	}
	if err != nil {
		return err
	}
	h.attachNotify(a)
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.byCID[ep.CID]; ep.Kind == contract.LinkVsock && !viaHybrid(ep) && cur != "" && cur != uuid {
		a.close(h)
		return fmt.Errorf("attaching vsock link of instance %s: CID %d belongs to instance %s: %w", uuid, ep.CID, cur, errdefs.ErrConflict)
	}
	if ep.Kind == contract.LinkVsock && !viaHybrid(ep) {
		h.byCID[ep.CID] = uuid
	}
	h.attached[uuid] = a
	return nil
}

// viaHybrid reports whether ep is a vsock link whose host side is a
// user-space vsock device's hybrid socket (the QEMU backends'
// qemu.vsock=user, docs/vsock.md): the guest uses AF_VSOCK, the host the
// hybrid convention on ep.Path.
func viaHybrid(ep *contract.LinkEndpoint) bool {
	return ep.Kind == contract.LinkVsock && ep.Path != ""
}

// Detach stops serving the instance's link (its hybrid socket is closed and
// removed). Detaching an instance that is not attached does nothing.
func (h *Host) Detach(uuid string) {
	h.opMu.RLock()
	defer h.opMu.RUnlock()
	defer h.lockInstance(uuid)()
	h.detach(uuid)
}

// lockInstance waits until no other Attach or Detach of uuid runs and
// returns the function that lets the next one run.
func (h *Host) lockInstance(uuid string) (unlock func()) { return h.ops.Lock(uuid) }

func (h *Host) detach(uuid string) {
	h.mu.Lock()
	a := h.attached[uuid]
	delete(h.attached, uuid)
	if a != nil && a.ep.Kind == contract.LinkVsock && h.byCID[a.ep.CID] == uuid {
		delete(h.byCID, a.ep.CID)
	}
	h.mu.Unlock()
	if a != nil {
		a.close(h)
	}
}

func (a *attachment) close(h *Host) {
	close(a.done)
	defer a.closeConns()
	if a.gated {
		h.gate.unregister(a.gateFD)
	}
	if a.ln != nil {
		a.ln.Close() // a Unix listener removes its socket file
		if a.lnFD {
			h.fds.release()
		}
	}
	if a.session != nil {
		a.session.Close()
	}
	if a.notifyLn != nil {
		a.notifyLn.Close() // removes its socket file
	}
}

// Endpoint returns the endpoint an instance is attached with.
func (h *Host) Endpoint(uuid string) (contract.LinkEndpoint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.attached[uuid]
	if !ok {
		return contract.LinkEndpoint{}, false
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
	switch kind := a.ep.Kind; {
	case kind == contract.LinkHybrid || viaHybrid(&a.ep):
		// A dial takes a descriptor of the budget as an accepted
		// connection does (a restarted daemon advertises to every guest
		// at once).
		if !h.fds.acquire(ctx.Done(), a.done) {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("dialing agent of instance %s: waiting for a link descriptor: %w", uuid, ctx.Err())
			}
			return nil, fmt.Errorf("dialing agent of instance %s: link detached: %w", uuid, errdefs.ErrUnavailable)
		}
		if c, err = hybrid.Dial(ctx, a.ep.Path, AgentPort); err != nil {
			h.fds.release()
		} else {
			c = &budgetConn{Conn: c, release: h.fds.release}
		}
	case kind == contract.LinkVsock:
		c, err = h.cfg.DialVsock(ctx, a.ep.CID, AgentPort)
	case kind == contract.LinkSerial:
		c, err = a.session.Dial(ctx, AgentPort)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing agent of instance %s over %s: %w", uuid, a.ep.Kind, err)
	}
	return c, nil
}

var _ net.Listener = (*Host)(nil)

// startGate makes the accept gate on the first hybrid link (a host without
// one runs no gate goroutine). Called with opMu held for reading. Without
// epoll each hybrid link accepts from a goroutine of its own, with no
// descriptor bound.
func (h *Host) startGate() error {
	h.gateMu.Lock()
	defer h.gateMu.Unlock()
	if h.gate != nil || h.gateFailed {
		return nil
	}
	gate, err := newAcceptGate(h.fds, h.done, h.cfg.Logger.Error, h.acceptReady)
	if err != nil {
		if h.fds.bounded() {
			return err
		}
		h.gateFailed = true
		h.cfg.Logger.Warn("linkhost: no accept gate, a goroutine per hybrid link", "err", err)
		return nil
	}
	h.gate = gate
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		gate.run()
	}()
	return nil
}
