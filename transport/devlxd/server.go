// Package devlxd serves the devlxd API to guest agents over the guest link:
// LXD's devlxd handlers answering in the LXD envelope (link/devlxdapi), over
// TLS with the daemon's certificate, on connections a link host accepted and
// tied to one instance (core/linkhost). The agent inside the guest proxies
// /dev/lxd/sock to these handlers and unwraps the envelope.
//
// A request is answered only when the connection's instance exists, its
// agent's certificate is byte for byte the client certificate presented on
// the connection and that certificate is within its validity; otherwise the
// answer is 401 Unauthorized. A guest can therefore only ever read and change
// itself.
//
// Server.ServeConn serves one connection without a link host; only tests and
// benchmarks call it, the daemon uses Serve.
package devlxd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/internal/httpdrain"
)

// Instances is what the handlers need from the instance service
// (*instance.Manager implements it).
type Instances interface {
	// GetByUUID returns the instance with the given UUID, or an error
	// wrapping errdefs.ErrNotFound.
	GetByUUID(ctx context.Context, uuid string) (*instance.Instance, error)
	// Get returns the instance called name, or an error wrapping
	// errdefs.ErrNotFound.
	Get(ctx context.Context, name string) (*instance.Instance, error)
	// SetReady sets the instance's ready flag; setting it true emits
	// instance-ready every time.
	SetReady(ctx context.Context, uuid string, ready bool, by events.Requestor) error
}

// AgentCerts gives the agent certificate of an instance (*pki.Store
// implements it). It must not create certificates.
type AgentCerts interface {
	// AgentCertDER returns the instance's agent certificate, DER (compared
	// byte for byte with the certificate the guest presents).
	AgentCertDER(instanceName string) ([]byte, error)
}

// InstanceTypes says what the guests of each backend are (*pluginhost.Host
// implements it).
type InstanceTypes interface {
	// InstanceType returns "container" or "virtual-machine" for the named
	// backend.
	InstanceType(backend string) string
}

// vmTypes is the InstanceTypes of a daemon that knows no better.
type vmTypes struct{}

func (vmTypes) InstanceType(string) string { return "virtual-machine" }

// Defaults of Config.
const (
	DefaultReadHeaderTimeout = 3 * time.Second
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultWriteTimeout      = 30 * time.Second
	DefaultBodyLimit         = 64 << 10
	DefaultMaxHandshakes     = 512
	DefaultMaxHandshakeWait  = 5 * time.Second
	DefaultStateRate         = statebudget.DefaultRate
	DefaultStateBurst        = statebudget.DefaultBurst
	requestTimeout           = 30 * time.Second
	// handshakesPerInstance is how many of the MaxHandshakes one instance's
	// connections may hold at once: a guest stalling its handshakes (each
	// up to ReadHeaderTimeout) keeps at most this many from the others.
	handshakesPerInstance = 2
)

// Config configures a Server.
type Config struct {
	// Instances looks instances up and sets their ready flag. Required.
	Instances Instances
	// Tokens checks the devlxd bearer tokens guests send for the trusted
	// management API; nil refuses every token (the API stays untrusted).
	Tokens Tokens
	// Storage and Devices serve the trusted management routes (volumes,
	// instance devices); nil answers those routes 501.
	Storage Storage
	Devices Devices
	// Certs gives each instance's agent certificate. Required.
	Certs AgentCerts
	// Certificate is the daemon's TLS server certificate (pki.Store.Daemon).
	// Required.
	Certificate tls.Certificate
	// InstanceTypes gives the instance type GET /1.0 reports (default:
	// every guest is a "virtual-machine").
	InstanceTypes InstanceTypes
	// Images gives read access to the host's images for GET
	// /1.0/images/{fingerprint}/export; nil means there are none (404).
	Images ImageStore
	// Location is the host name reported in GET /1.0 (default os.Hostname).
	Location string
	// ReadHeaderTimeout bounds the TLS handshake and the reading of each
	// request (default 3 s; the bodies are small).
	ReadHeaderTimeout time.Duration
	// MaxHandshakes is how many TLS handshakes run at once (default 512);
	// more connections wait for one to end, the newest first (lifoTokens).
	// Without a bound, a storm of new connections (10,000 guests declaring
	// Ready at once) shares the CPU among thousands of half-done
	// handshakes, and they all outlast their clients' timeouts together.
	// It is not smaller because under load most of a handshake is spent
	// waiting for the client's answer: at 10,000 guests 128 slots left
	// the CPU idle while they waited on slow clients.
	MaxHandshakes int
	// MaxHandshakeWait is how long a connection may wait for its handshake
	// to start (default 5 s, the agent's and the link's handshake timeout):
	// then it is closed unanswered, as its client has given up on it, and
	// handshaking it would make the server work for nobody.
	MaxHandshakeWait time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (default 10 min, less than the agent's
	// upstream.IdleTimeout: the daemon is the one that closes). How many
	// idle connections are kept is bounded by KeptMemory and the links'
	// descriptors (CloseOldestIdle).
	IdleTimeout time.Duration
	// KeptMemory is the memory the idle kept-alive connections may hold
	// together, in bytes, counted as KeptConnBytes each (default
	// DefaultKeptMemory; negative keeps none: every connection is closed
	// once answered). Past it the connection idle the longest is closed;
	// its guest's next request resumes its TLS session on a new one.
	KeptMemory int64
	// WriteTimeout bounds each write of a response (default 30 s): a
	// guest that stops reading is dropped, a long download (an image
	// export) lasts as long as the guest reads.
	WriteTimeout time.Duration
	// BodyLimit is the largest request body accepted, in bytes (default
	// 64 KiB); larger bodies are answered 413.
	BodyLimit int
	// StateRate is how many PATCH /1.0 (state changes) per second one
	// instance may send over time, and StateBurst how many at once (default
	// 10 per second, bursts of 20). Each accepted one is recorded (an event,
	// a timeline entry), so a guest must not send them unbounded: those over
	// the limit are answered 429 Too Many Requests. They are used only when
	// StateBudget is nil.
	StateRate  float64
	StateBurst int
	// StateBudget is the per-instance budget of state changes shared with
	// the agent monitor's ring words (core/statebudget): the daemon passes
	// one Budget to both so a guest has one budget across every path. Nil
	// makes a Budget of StateRate and StateBurst for this server alone.
	StateBudget *statebudget.Budget
	// TicketRotation is how often the TLS session ticket key changes
	// (default DefaultTicketRotation); tickets are bound to the instance
	// whose link issued them (tlsFor).
	TicketRotation time.Duration
	// TicketKeysFile, when set, keeps the session ticket keys across
	// restarts (mode 0600; the daemon's is STATE/pki/devlxd-ticket-keys):
	// the agents' tickets then resume on the restarted daemon within their
	// keys' two periods. A file group or others may read is not used (it is
	// replaced by fresh keys). Empty keeps the keys in memory only.
	TicketKeysFile string
	// Now is the clock used to check certificate validity (default time.Now).
	Now func() time.Time
	// Logger receives errors of the listener (default slog.Default).
	Logger *slog.Logger
	// Observer, when set, is told of every request once it is answered
	// (core/metrics counts them); nil observes nothing.
	Observer RequestObserver
}

// Server serves the devlxd API. Create it with New, feed it connections with
// Serve or ServeConn, stop it with Shutdown.
type Server struct {
	cfg         Config
	stateLimits *statebudget.Budget // PATCH /1.0 by instance UUID
	kept        *keptConns          // the idle kept-alive connections
	tls         *tls.Config
	tickets     *ticketKeys
	app         *fiber.App
	drain       *httpdrain.Drain // ends the shutdown once no connection is left
	queue       *connQueue
	// handshakes holds a token per TLS handshake running (MaxHandshakes),
	// given to the newest waiting connection first.
	handshakes *lifoTokens
	// hsWaiting counts connections waiting for a handshake token and
	// hsStale those closed because they waited too long.
	hsWaiting, hsStale atomic.Int64
	// hsInstances holds each instance's share of the handshake tokens
	// (handshakesPerInstance) while it has connections waiting or in a
	// handshake.
	hsMu        sync.Mutex
	hsInstances map[string]*instanceHandshakes
	ops         *operations
	// infoBodies are the untrusted GET /1.0 envelopes, indexed by ready
	// (1), container (2) and volume management (4), encoded on first use
	// (getInfo).
	infoBodies [8]atomic.Pointer[[]byte]
	// life is the handlers' context (reqCtx): Shutdown cancels it, so a
	// request waiting on the instance service (a declaration's store
	// write queued in a storm) ends at once instead of holding the stop.
	life    context.Context
	endLife context.CancelFunc
	done    chan struct{} // closed when the HTTP server returned
	once    sync.Once
}

// New returns a running Server that serves the connections handed to it.
func New(cfg Config) (*Server, error) {
	if cfg.Instances == nil || cfg.Certs == nil {
		return nil, errors.New("devlxd server: Instances and Certs are required")
	}
	if len(cfg.Certificate.Certificate) == 0 {
		return nil, errors.New("devlxd server: Certificate is required")
	}
	if cfg.Location == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("devlxd server: reading host name: %w", err)
		}
		cfg.Location = host
	}
	if cfg.InstanceTypes == nil {
		cfg.InstanceTypes = vmTypes{}
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.MaxHandshakeWait <= 0 {
		cfg.MaxHandshakeWait = DefaultMaxHandshakeWait
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.KeptMemory == 0 {
		cfg.KeptMemory = DefaultKeptMemory
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StateRate <= 0 {
		cfg.StateRate = DefaultStateRate
	}
	if cfg.StateBurst <= 0 {
		cfg.StateBurst = DefaultStateBurst
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StateBudget == nil {
		cfg.StateBudget = statebudget.New(cfg.StateRate, cfg.StateBurst)
	}
	s := &Server{
		cfg:         cfg,
		stateLimits: cfg.StateBudget,
		tls: &tls.Config{
			Certificates: []tls.Certificate{cfg.Certificate},
			// The certificate is checked per request against the agent
			// certificate of the connection's instance, so that a missing
			// or wrong one is answered 401 rather than a TLS alert.
			ClientAuth:       tls.RequestClientCert,
			MinVersion:       tls.VersionTLS13,
			CurvePreferences: linkCurves,
		},
		kept:        newKeptConns(int(max(cfg.KeptMemory, 0) / KeptConnBytes)),
		queue:       newConnQueue(),
		handshakes:  newLIFOTokens(cfg.MaxHandshakes),
		hsInstances: map[string]*instanceHandshakes{},
		ops:         newOperations(),
		done:        make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	if cfg.TicketRotation <= 0 {
		cfg.TicketRotation = DefaultTicketRotation
	}
	s.cfg = cfg
	s.tickets = &ticketKeys{file: cfg.TicketKeysFile, period: cfg.TicketRotation, now: cfg.Now}
	nextRotation, err := s.tickets.restore()
	if s.tickets.set.Load() == nil {
		return nil, err
	}
	if err != nil {
		// The server runs on fresh keys; only resumption across this
		// restart (or the next) is lost.
		cfg.Logger.Warn("devlxd: session ticket keys not restored", "err", err)
	}
	go s.rotateTickets(nextRotation, cfg.TicketRotation, s.queue.closed)
	s.app = fiber.New(fiber.Config{
		Immutable:             true,
		DisableStartupMessage: true,
		StrictRouting:         true,
		CaseSensitive:         true,
		BodyLimit:             cfg.BodyLimit,
		ReadTimeout:           cfg.ReadHeaderTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		ErrorHandler:          errorHandler,
		// An idle kept-alive connection lets its read and write
		// buffers and request context go (BenchmarkKeptConnections):
		// thousands of guests keep one each.
		ReduceMemoryUsage: true,
	})
	s.app.Server().ConnState = s.kept.state
	s.drain = httpdrain.Track(s.app.Server())
	s.routes()
	go func() {
		defer close(s.done)
		// Every write gets its own deadline: an image export lasts as
		// long as the guest reads it, a guest that stops reading is
		// dropped after WriteTimeout.
		conns := listener.Limit(s.queue, listener.Limits{Name: "devlxd", Logger: cfg.Logger, WriteTimeout: cfg.WriteTimeout})
		if err := s.drain.Serve(func() error { return s.app.Listener(conns) }); err != nil {
			cfg.Logger.Error("devlxd: HTTP server stopped", "err", err)
		}
	}()
	return s, nil
}

// Serve hands every connection accepted on ln to the server until ln fails
// or is closed; it returns nil when ln was closed. The connections must carry
// an Identity (see linkhost.IdentityOf): those that do not are answered 401.
// Serve may be called for several listeners at once.
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accepting devlxd connections on %s: %w", ln.Addr(), err)
		}
		if err := s.admit(c); err != nil {
			return nil
		}
	}
}

// admit negotiates TLS on c once a handshake token is free (MaxHandshakes,
// at most handshakesPerInstance per instance; under a storm the newest
// connection first, see lifoTokens) and then hands it to the HTTP server. c
// is closed unanswered when it waited MaxHandshakeWait without a token (its
// client has given up) or the handshake fails. It returns without waiting,
// or net.ErrClosed (c closed) after Shutdown.
func (s *Server) admit(c net.Conn) error {
	select {
	case <-s.queue.closed:
		c.Close()
		return net.ErrClosed
	default:
	}
	deadline := time.Now().Add(s.cfg.MaxHandshakeWait)
	id, _ := linkhost.IdentityOf(c)
	go func() {
		own := s.instanceHandshakes(id.InstanceUUID)
		defer s.releaseInstanceHandshakes(id.InstanceUUID, own)
		s.hsWaiting.Add(1)
		ok := s.acquireOwn(own.tokens, deadline)
		if ok && !s.handshakes.acquireFor(id.InstanceUUID, time.Until(deadline), s.queue.closed) {
			<-own.tokens
			ok = false
		}
		s.hsWaiting.Add(-1)
		if !ok {
			select {
			case <-s.queue.closed:
			default:
				s.hsStale.Add(1)
			}
			c.Close()
			return
		}
		tc := tls.Server(c, s.tlsFor(id.InstanceUUID))
		_ = tc.SetDeadline(time.Now().Add(s.cfg.ReadHeaderTimeout))
		err := tc.Handshake()
		s.handshakes.release()
		<-own.tokens
		if err != nil {
			s.cfg.Logger.Debug("devlxd: TLS handshake", "err", err)
			c.Close()
			return
		}
		_ = tc.SetDeadline(time.Time{}) // the HTTP server sets its own
		if err := s.queue.push(tc); err != nil {
			tc.Close()
		}
	}()
	return nil
}

// instanceHandshakes is one instance's share of the handshake tokens.
type instanceHandshakes struct {
	tokens chan struct{}
	refs   int // connections of the instance waiting or in a handshake
}

func (s *Server) instanceHandshakes(uuid string) *instanceHandshakes {
	s.hsMu.Lock()
	defer s.hsMu.Unlock()
	h := s.hsInstances[uuid]
	if h == nil {
		h = &instanceHandshakes{tokens: make(chan struct{}, handshakesPerInstance)}
		s.hsInstances[uuid] = h
	}
	h.refs++
	return h
}

func (s *Server) releaseInstanceHandshakes(uuid string, h *instanceHandshakes) {
	s.hsMu.Lock()
	defer s.hsMu.Unlock()
	if h.refs--; h.refs == 0 {
		delete(s.hsInstances, uuid)
	}
}

// acquireOwn takes one of an instance's handshake tokens, waiting in
// arrival order until deadline; false when the deadline passed or the
// server is shut down.
func (s *Server) acquireOwn(sem chan struct{}, deadline time.Time) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-s.queue.closed:
		return false
	}
}

// ServeConn hands one raw connection (TLS not yet negotiated) to the server
// as if a link had accepted it for the instance id names, and returns at
// once (the handshake is admitted as Serve's are). It is how the daemon serves devlxd over a local socket
// without a link (benchmarks, tests); the TLS and certificate rules apply
// unchanged. It fails with net.ErrClosed after Shutdown.
func (s *Server) ServeConn(c net.Conn, id linkhost.Identity) error {
	if err := s.admit(linkhost.WithIdentity(c, id)); err != nil {
		return fmt.Errorf("serving devlxd connection: %w", err)
	}
	return nil
}

// CloseOldestIdle closes the kept-alive connection idle the longest and
// reports whether there was one. A link host calls it when it needs a
// descriptor its budget does not have (linkhost.Host.SetReclaim): links
// come before kept connections.
func (s *Server) CloseOldestIdle() bool { return s.kept.closeOldest() }

// KeptStats is what KeptConnections reports.
type KeptStats struct {
	// Idle is how many kept-alive connections are idle between two
	// requests, Budget how many the memory allowance keeps (KeptMemory /
	// KeptConnBytes).
	Idle, Budget int
	// Closed counts the idle connections closed for the budget: over
	// Budget, or for a link's descriptor.
	Closed uint64
}

// KeptConnections reports the idle kept-alive connections and their budget.
func (s *Server) KeptConnections() KeptStats {
	idle, limit, closed := s.kept.stats()
	return KeptStats{Idle: idle, Budget: limit, Closed: closed}
}

// Shutdown stops accepting connections, cancels the work of the requests
// in flight (their calls to the services get a cancelled context and the
// guest an error it retries), closes idle connections, waits for those
// requests to be answered (until ctx ends) and returns.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.endLife()
		// The kept connections idle (thousands after a storm) are closed
		// at once, and the shutdown ends when the last is gone, not at
		// fasthttp's next 100 ms look at its count.
		err = s.drain.Shutdown(ctx, s.app.ShutdownWithContext)
		s.queue.Close()
		select {
		case <-s.done:
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
		}
	})
	if err != nil {
		return fmt.Errorf("shutting down devlxd server: %w", err)
	}
	return nil
}

// connQueue is the listener the HTTP server serves: connections pushed into
// it are accepted in order.
type connQueue struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) error {
	select {
	case <-q.closed:
		return net.ErrClosed
	default:
	}
	select {
	case q.ch <- c:
		return nil
	case <-q.closed:
		return net.ErrClosed
	}
}

// Accept returns the next pushed connection.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and push fail with net.ErrClosed.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

// Addr names the queue.
func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "link" }
func (queueAddr) String() string  { return "devlxd" }

var _ net.Listener = (*connQueue)(nil)
