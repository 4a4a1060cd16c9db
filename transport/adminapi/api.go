// Package adminapi is guestlink's admin API: LXD-style JSON envelopes over fiber
// on the daemon's Unix socket (and optionally localhost TCP), plus the
// /1.0/events websocket. Handlers turn requests into calls on the services
// declared below and map the services' error kinds (errdefs) to HTTP
// statuses; they hold no state of their own.
package adminapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/httpdrain"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// Instances is the instance service the API drives (core/instance.Manager).
// Every method returns errors wrapping a errdefs kind; by names who
// asked, for the event log and the timeline.
type Instances interface {
	Create(ctx context.Context, req instance.CreateRequest, by events.Requestor) (*instance.Instance, error)
	Get(ctx context.Context, name string) (*instance.Instance, error)
	List(ctx context.Context, filter instance.ListFilter) ([]*instance.Instance, error)
	Start(ctx context.Context, name string, by events.Requestor) error
	Stop(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Restart(ctx context.Context, name string, opts instance.StopOptions, by events.Requestor) error
	Delete(ctx context.Context, name string, force bool, by events.Requestor) error
	UpdateConfig(ctx context.Context, name string, set map[string]string, unset []string, by events.Requestor) (*instance.Instance, error)
	Timeline(ctx context.Context, name string, limit int) ([]instance.TimelineEntry, error)
}

// EventSource is the event bus the /1.0/events websocket subscribes to
// (core/events.Bus). A subscription delivers every matching event after
// filter.After in id order; its channel closes when the subscription ends,
// and Err then says why (nil after Close).
type EventSource interface {
	Subscribe(filter events.Filter) (*events.Subscription, error)
}

// Backends lists the backend plugins and their health (plugins/pluginhost).
type Backends interface {
	List() []pluginhost.Status
}

// Defaults of Config.
const (
	DefaultBodyLimit    = 1 << 20
	DefaultPingInterval = 30 * time.Second
	// MinPongWait is the least time a websocket client has to answer a
	// ping: a short PingInterval (credentials checked often) must not drop
	// clients of a loaded machine whose answer is a few ticks late.
	MinPongWait = 10 * time.Second
	// DefaultTimelineSummary is how many timeline entries the instance
	// object carries.
	DefaultTimelineSummary = 20
)

// Config configures an API.
type Config struct {
	// Instances, Events and Backends are the services behind the API; all
	// three are required.
	Instances Instances
	Events    EventSource
	Backends  Backends
	// Version is reported as server_version by GET /1.0.
	Version string
	// BodyLimit caps request bodies (bytes); larger ones are answered 413.
	// Zero means DefaultBodyLimit.
	BodyLimit int
	// PingInterval is how often event websockets are pinged (and TCP
	// clients' credentials checked again); a client that does not answer
	// within two intervals, and at least MinPongWait, is dropped. Zero
	// means DefaultPingInterval.
	PingInterval time.Duration
	// Logger receives the API's own log lines; nil discards them.
	Logger *slog.Logger
	// Limits bound concurrent requests (see Limits; zero: the defaults).
	Limits Limits
	// Auth authenticates requests on TCP listeners and serves the
	// /1.0/certificates and /1.0/auth routes. Without it every TCP request
	// is refused (401) and those routes answer 501.
	Auth Authenticator
	// Hosts are the extra names a TCP request's Host header may give
	// (besides localhost and the listener's address): guestlinkd's
	// --http-host.
	Hosts []string
	// Consoles serves GET /1.0/instances/{name}/console; nil answers 501.
	Consoles Consoles
	// DashboardURL returns the dashboard's base URL ("http://127.0.0.1:8080")
	// for one-time login URLs; nil or "" when no TCP listener serves it.
	DashboardURL func() string
	// Metrics, when set, is served at /metrics (Prometheus exposition
	// format, core/metrics), authenticated like the /1.0 routes.
	Metrics http.Handler
	// Storage serves the /1.0/storage-pools routes; nil answers 501.
	Storage Storage
	// Images is the image store behind /1.0/images; nil answers 501.
	Images ImageService
	// Cluster is this daemon's cluster membership; nil outside a cluster
	// (the /1.0/cluster routes then answer 404).
	Cluster ClusterService
	// DefaultBackend is the backend of a create that names none (for
	// placing it on a cluster member).
	DefaultBackend string
	// Exec reaches the agents for POST /1.0/instances/{name}/exec (exec.go); nil answers 501.
	Exec Execer
	// Agents relays /1.0/instances/{name}/files to the guests' agents
	// (files.go); nil answers 501.
	Agents AgentRelay
	// Guests are the agents' reports of their guests (guest.go): the
	// state route's "guest", the instance's, the list's IPv4; nil shows
	// none.
	Guests GuestReports
	// Recovering, when set, returns how many instances the daemon has not
	// yet recovered since it started (GET /1.0's environment.recovering).
	Recovering func() int
}

// API is the admin API. Create it with New, then Serve it on one or more
// listeners (the Unix socket, a localhost TCP port) and Shutdown it once.
type API struct {
	cfg Config
	app *fiber.App
	log *slog.Logger

	// drain ends the shutdown once no connection is left.
	drain *httpdrain.Drain

	mu        sync.Mutex
	closing   chan struct{} // closed by Shutdown: event websockets end
	closed    bool
	listeners []net.Listener
	streams   sync.WaitGroup // running event websockets
	lim       limits         // enforce cfg.Limits
	ops       operations     // exec operations (operations.go)
}

// New returns an API serving cfg's services. It panics if a service is
// missing, which is a wiring bug.
func New(cfg Config) *API {
	if cfg.Instances == nil || cfg.Events == nil || cfg.Backends == nil {
		panic("api.New: Instances, Events and Backends are required")
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{cfg: cfg, log: cfg.Logger, closing: make(chan struct{})}
	a.app = fiber.New(FiberConfig(cfg.BodyLimit))
	a.drain = httpdrain.Track(a.app.Server())
	a.Register(a.app)
	return a
}

// DefaultWriteTimeout is the admin API's fiber WriteTimeout (FiberConfig).
const DefaultWriteTimeout = 30 * time.Second

// FiberConfig returns the fiber settings the admin API needs, for a daemon
// that builds its own app and calls Register on it: Immutable request
// strings, no prefork, the body limit (bytes), and an error handler that
// answers in the LXD error envelope (including 413 for oversized bodies).
func FiberConfig(bodyLimit int) fiber.Config {
	if bodyLimit <= 0 {
		bodyLimit = DefaultBodyLimit
	}
	return fiber.Config{
		AppName:               "guestlink",
		Immutable:             true,
		Prefork:               false,
		DisableStartupMessage: true,
		BodyLimit:             bodyLimit,
		// The API takes JSON only: a multipart body is refused by the handler
		// with a precise message rather than parsed.
		DisablePreParseMultipartForm: true,
		// Request bodies are streamed, so that a file push goes to the
		// agent as it arrives; limitBodies (files.go) holds every other
		// request to BodyLimit.
		StreamRequestBody: true,
		// Proxy headers (X-Forwarded-Host, -Proto, -For) are never trusted:
		// with the check on and no trusted proxy, c.Hostname(), c.Protocol()
		// and c.IP() read the request itself.
		EnableTrustedProxyCheck: true,
		TrustedProxies:          []string{},
		ReadTimeout:             time.Minute,
		IdleTimeout:             2 * time.Minute,
		// Bounds writing a response; the daemon's listeners also give
		// every write its own deadline (core/listener), so streams last
		// as long as their clients read.
		WriteTimeout: DefaultWriteTimeout,
		ErrorHandler: errorHandler(bodyLimit),
	}
}

// Register adds the API's routes under /1.0 to r. Errors of these routes are
// always answered in the LXD envelope, whatever r's error handler. Handlers
// return a value or an error and are registered through a.ok or a.created
// (wrap.go), which parse the route's path parameters first and answer in
// the envelopes; only streams answer themselves.
func (a *API) Register(r fiber.Router) {
	r.Use(limitBodies)
	v1 := r.Group("/1.0", a.envelopeErrors, a.CheckHost, a.authenticate, a.forward, a.limit)
	name := instanceNameParam
	v1.Get("/", a.ok(a.getServer))
	v1.Get("/instances", a.listInstances)
	v1.Post("/instances", a.created(decoded(a.createInstance)))
	v1.Get("/instances/:name", a.ok(a.getInstance, name))
	v1.Patch("/instances/:name", a.ok(decoded(a.patchInstance), name))
	v1.Delete("/instances/:name", a.ok(a.deleteInstance, name))
	v1.Get("/instances/:name/state", a.ok(a.getState, name))
	v1.Put("/instances/:name/state", a.ok(decoded(a.putState), name))
	v1.Get("/instances/:name/timeline", a.ok(a.getTimeline, name))
	a.registerSnapshots(v1)
	v1.Get("/backends", a.ok(a.listBackends))
	v1.Post("/backends", a.ok(decoded(a.installBackend)))
	v1.Post("/backends/:name/restart", a.ok(a.restartBackend, restartBackendParam))
	v1.Post("/backends/:name/reload", a.ok(a.reloadBackend, reloadBackendParam))
	a.registerBackendInfo(v1)
	v1.Get("/events", a.eventsUpgrade, a.eventsSocket())
	a.registerAuth(v1)
	a.registerMetrics(r)
	a.registerConsole(v1)
	a.registerWait(v1)
	a.registerDevices(v1)
	a.registerStorage(v1)
	a.registerImages(v1)
	a.registerProfiles(v1)
	a.registerCluster(r, v1)
	a.registerExec(v1)
	a.registerFiles(v1)
}

// Serve answers requests on ln until Shutdown; it may be called for several
// listeners at once. It returns nil after Shutdown (at once, closing ln, if
// Shutdown came first).
func (a *API) Serve(ln net.Listener) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	a.listeners = append(a.listeners, ln)
	a.mu.Unlock()
	if err := a.drain.Serve(func() error { return a.app.Listener(ln) }); err != nil {
		a.mu.Lock()
		closed := a.closed
		a.mu.Unlock()
		if closed && errors.Is(err, net.ErrClosed) {
			return nil
		}
		return fmt.Errorf("serving admin API on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Shutdown closes the listeners, ends the event websockets (close code 1001)
// and waits for running requests until ctx is done.
func (a *API) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.closing)
	}
	lns := a.listeners
	a.listeners = nil
	a.mu.Unlock()
	err := a.drain.Shutdown(ctx, a.app.ShutdownWithContext)
	// A Serve that had not yet handed its listener to fasthttp when
	// fasthttp shut down stops here.
	for _, ln := range lns {
		_ = ln.Close()
	}
	done := make(chan struct{})
	go func() { a.streams.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutting down admin API: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("shutting down admin API: %w", err)
	}
	return nil
}

// getServer answers GET /1.0.
func (a *API) getServer(*request) (any, error) {
	list := a.cfg.Backends.List()
	names := make([]string, 0, len(list))
	for _, b := range list {
		names = append(names, b.Name)
	}
	info := serverInfo(a.cfg.Version, os.Getpid(), names)
	if a.cfg.Recovering != nil {
		info.Environment.Recovering = a.cfg.Recovering()
	}
	return info, nil
}

// The services the daemon wires in satisfy the interfaces.
var (
	_ Instances   = (*instance.Manager)(nil)
	_ EventSource = (*events.Bus)(nil)
	_ Backends    = (*pluginhost.Host)(nil)
)
