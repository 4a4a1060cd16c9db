// Package daemon wires guestlinkd together: the store, the event bus, the
// plugin host, the instance manager, the guest-link services (PKI, link
// listeners, devlxd, agent monitor), the admin API on its Unix socket and,
// when asked, the admin API and the dashboard on a localhost TCP address. It
// is the composition root, the one package that knows every part; it lives
// beside cmd/guestlinkd so that nothing in core imports web.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/core/agentmon"
	"github.com/guestlink/guestlink/core/cluster"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/core/metrics"
	"github.com/guestlink/guestlink/core/oomwatch"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/internal/httpdrain"
	"github.com/guestlink/guestlink/internal/statelock"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/devlxd"
	"github.com/guestlink/guestlink/web"
)

// Version is the daemon's version, set at build time.
var Version = "dev"

// Config configures a daemon.
type Config struct {
	// StateDir holds the database, the admin socket, keys and plugin data.
	StateDir string
	// HTTPAddr, when set, serves the admin API and the dashboard on plain
	// HTTP (e.g. 127.0.0.1:8080); loopback addresses only.
	HTTPAddr string
	// HTTPSAddr, when set, serves them over TLS on any address; TLSCert
	// and TLSKey name the certificate, else a self-signed one is made
	// under StateDir (see http.go).
	HTTPSAddr, TLSCert, TLSKey string
	// HTTPHosts are the extra names the Host header of TCP requests may give.
	HTTPHosts []string
	// DatabaseURL selects the store (default SQLite in StateDir).
	DatabaseURL string
	// PluginDir holds the backend plugins and their SHA256SUMS.
	PluginDir string
	// DefaultBackend is used when a launch names none (default "sim").
	DefaultBackend string
	// AllowDiskPaths lets disk devices take a host path as source (off:
	// only storage pool volumes; guestlinkd --allow-disk-paths).
	AllowDiskPaths bool
	// ImageMaxSize is the largest image file an import takes (apparent
	// size; zero: images.DefaultMaxSize, 64 GiB; guestlinkd
	// --image-max-size).
	ImageMaxSize int64
	// Logger receives the daemon's log (default: text on stderr).
	Logger *slog.Logger
	// LogLevel sets the level of plugin logs carried into the daemon's log.
	LogLevel slog.Level
	// GuestRingBytes and GuestRingLines are each guest's ring read budget
	// per second (agentmon.Config.RingBytesPerSecond and
	// RingLinesPerSecond; zero takes agentmon's defaults, 4096 and 20).
	GuestRingBytes float64
	GuestRingLines float64
	// GuestStateChanges is each guest's budget of agent and Ready state
	// changes per second, across devlxd, ring words and the guest's own
	// reboots (bursts of twice that; zero takes statebudget's defaults, 10
	// and 20).
	GuestStateChanges float64
	// APILimits bound the admin API's concurrent requests (zero: defaults).
	APILimits adminapi.Limits
	// Cluster configures membership of a cluster (PostgreSQL only; see
	// docs/cluster.md).
	Cluster ClusterConfig
	// TCPLimits bound the TCP listeners' connections (zero fields:
	// derived from the open-file limit).
	TCPLimits TCPLimits
	// DevlxdKeptMemory is the memory the guests' idle kept-alive devlxd
	// connections may hold together (devlxd.Config.KeptMemory; zero:
	// devlxd.DefaultKeptMemory, negative: none kept; guestlinkd
	// --devlxd-kept-memory).
	DevlxdKeptMemory int64
	// WriteTimeout is how long one write to a client of the admin socket,
	// the TCP listeners or the cluster listener may block before the
	// connection is dropped (default DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// Daemon is a running guestlinkd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	lock    *statelock.Lock // the state directory's; released last
	store   db.Store
	bus     *events.Bus
	plugins *pluginhost.Host
	mgr     *instance.Manager
	images  *images.Store
	links   *linkhost.Host
	devlxd  *devlxd.Server
	// keptStats is devlxd for the metrics, set once it serves (they are
	// built before it).
	keptStats atomic.Pointer[devlxd.Server]
	monitor   *agentmon.Service
	oom       *oomwatch.Watcher // the consoles' OOM kills (OutOfMemory)
	storage   *storage.Service
	api       *adminapi.API
	metrics   *metrics.Metrics
	cluster   *cluster.Cluster // nil outside a cluster (SQLite)
	service   instanceService  // the manager, or its cluster-wide view
	// clusterCtx ends the heartbeat and the event listener (stopBeat).
	clusterCtx context.Context
	stopBeat   context.CancelFunc
	// stopRecovery cancels the start-up recovery and waits for it.
	stopRecovery func()
	clusterLn    net.Listener
	// dashStats is dash for the metrics, safe to read from a scrape.
	dashStats dashStats
	web       *fiber.App
	webDrain  *httpdrain.Drain // ends web's shutdown once no connection is left
	dash      *web.Dashboard
	unixLn    net.Listener
	tcpLn     net.Listener
	tcp       tcpState
	serving   chan error
	// tcpBudget counts the connections of every TCP listener (tcpConns).
	tcpMu     sync.Mutex
	tcpBudget *listener.Limited
}

// SocketPath returns the admin socket of a state directory.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, "guestlink.sock") }

// Start brings a daemon up: it returns once the admin socket answers, or
// with the first error (having undone what it started). Its first step in
// the state directory is to lock it (internal/statelock): on a directory
// another daemon holds it returns a *statelock.HeldError naming that
// daemon's PID, having opened nothing else. The lock is released by the
// shutdown (Wait), after everything else is closed.
func Start(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if cfg.StateDir == "" {
		return nil, errors.New("starting daemon: a state directory is required")
	}
	if err := CheckListen(cfg); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.DefaultBackend == "" {
		cfg.DefaultBackend = "sim"
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginhost.DefaultDir
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("starting daemon: state directory %q: %w", cfg.StateDir, err)
	}
	cfg.StateDir = abs
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("starting daemon: creating state directory: %w", err)
	}
	if err := checkPermissions(cfg); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	// One daemon per state directory, decided before anything in it is
	// opened: a second one must not touch the database, the socket or
	// the plugins of a live one.
	lock, err := statelock.Acquire(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, lock: lock, serving: make(chan error, 4)}
	defer func() {
		if err != nil {
			d.close(context.Background())
		}
	}()

	url := cfg.DatabaseURL
	if url == "" {
		url = db.DefaultURL(cfg.StateDir)
	}
	if d.store, err = db.Open(ctx, url, db.WithStateDir(cfg.StateDir), db.WithLogger(d.log.With("component", "db"))); err != nil {
		return nil, fmt.Errorf("starting daemon: opening the database: %w", err)
	}
	if err := d.openCluster(ctx, url); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	if err := d.openImages(); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	d.bus = events.New(d.store, events.WithLogger(d.log.With("component", "events")), events.WithLocation(d.clusterName()))
	if err := d.clusterEvents(ctx, url); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	if err := d.startAuth(); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}

	certs, err := pki.Open(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	late := &lateInstances{}
	d.metrics = newMetrics(d, late)
	notify := &systemdNotify{log: d.log.With("component", "link")}
	if d.links, err = linkhost.New(linkhost.Config{Serial: serialTransport{}, Logger: d.log.With("component", "link"),
		Observer: d.metrics, MaxDescriptors: linkDescriptors(), Notify: notify}); err != nil {
		return nil, fmt.Errorf("starting daemon: guest links: %w", err)
	}

	// The manager and the agent monitor need each other: the monitor is the
	// manager's hooks, the manager is the monitor's instance service.
	hooks := &lateHooks{}
	pluginLog := hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: os.Stderr, Level: hclog.Level(levelOf(cfg.LogLevel)), JSONFormat: false})
	var mgr *instance.Manager
	d.plugins = pluginhost.New(pluginhost.Config{
		Dir:    cfg.PluginDir,
		Logger: pluginLog,
		Env:    []string{"GUESTLINK_PLUGIN_DATA_DIR=" + filepath.Join(cfg.StateDir, "plugins")},
		OnEvent: func(backend string, ev sdk.Event) {
			if mgr != nil {
				mgr.HandleBackendEvent(backend, ev)
			}
		},
		OnRestart: func(backend string) {
			if mgr == nil {
				return
			}
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := mgr.Recover(rctx, backend); err != nil {
				d.log.Error("recovering guests after a plugin restart", "backend", backend, "err", err)
			}
		},
	})
	// One state-change budget per guest across devlxd, ring words and reboots.
	stateBudget := statebudget.New(cfg.GuestStateChanges, int(2*cfg.GuestStateChanges))
	d.monitor, err = agentmon.New(agentmon.Config{
		Instances:   late,
		Certs:       certs,
		Links:       d.links,
		Logger:      d.log.With("component", "agentmon"),
		StateBudget: stateBudget,
		Throttles:   late,

		RingObserver: d.metrics,

		RingBytesPerSecond: cfg.GuestRingBytes,
		RingLinesPerSecond: cfg.GuestRingLines,
	})
	if err != nil {
		return nil, fmt.Errorf("starting daemon: agent monitor: %w", err)
	}
	if d.storage, err = d.openStorage(); err != nil {
		return nil, fmt.Errorf("starting daemon: storage: %w", err)
	}
	mgr, err = instance.NewManager(instance.Config{
		Store:          d.store,
		Backends:       d.plugins,
		Bus:            d.bus,
		Hooks:          hooks,
		Files:          d.monitor,
		Freezer:        d.monitor,
		Logger:         d.log.With("component", "instance"),
		DefaultBackend: cfg.DefaultBackend,
		Volumes:        d.storage,
		AllowDiskPaths: cfg.AllowDiskPaths,
		Images:         imageSource{d.images},
		Location:       d.clusterName(),
		StateBudget:    stateBudget,
	})
	if err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	d.mgr = mgr
	notify.mgr.Store(mgr)
	d.service = d.instanceService()
	late.m = mgr
	d.storage.SetUsedBy(volumeUsers(mgr))
	hooks.set(d.monitor)
	d.oom = oomwatch.New(oomwatch.Config{Reporter: mgr, Logger: d.log.With("component", "oomwatch")})
	hooks.oom = d.oom
	if err := d.metrics.Start(); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}

	if d.devlxd, err = devlxd.New(devlxd.Config{
		Instances:   mgr,
		Certs:       certs,
		Certificate: certs.Daemon().TLS,
		Logger:      d.log.With("component", "devlxd"),
		StateBudget: stateBudget,
		// Kept across restarts: the agents' tickets resume on the
		// restarted daemon (docs/security.md).
		TicketKeysFile: filepath.Join(cfg.StateDir, pki.DaemonDir, devlxd.TicketKeysFile),
		Observer:       d.metrics,
		// What a guest is depends on its backend (sim guests are
		// processes: "container").
		InstanceTypes: d.plugins,
		Images:        d.images, // GET /1.0/images/{fingerprint}/export
		Tokens:        d.tcp.auth,
		Storage:       d.storage,
		Devices:       mgr,
		KeptMemory:    cfg.DevlxdKeptMemory,
	}); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	// Links come before kept connections: a link needing a descriptor
	// closes the idle one the longest.
	d.links.SetReclaim(d.devlxd.CloseOldestIdle)
	d.keptStats.Store(d.devlxd)
	links := d.retrying(d.links, "guest links")
	go d.serve("devlxd", func() error { return d.devlxd.Serve(links) })

	// The plugins start now; the admin API serves before they answer (a
	// call to a backend waits for its plugin's first start).
	if err := d.plugins.Launch(); err != nil {
		return nil, fmt.Errorf("starting daemon: plugins: %w", err)
	}
	if d.cluster != nil {
		if err := d.cluster.Beat(ctx); err != nil {
			return nil, fmt.Errorf("starting daemon: %w", err)
		}
	}
	// The guests are recovered only once the admin API serves (below) and
	// the plugins answered: it answers meanwhile, showing the guests not
	// yet recovered as such (status Unknown).
	if err := mgr.Load(ctx); err != nil {
		return nil, fmt.Errorf("starting daemon: loading instances: %w", err)
	}

	d.api = adminapi.New(adminapi.Config{Instances: d.service, Events: d.bus, Backends: d.plugins, Version: Version, Logger: d.log.With("component", "api"),
		Auth: d.tcp.auth, Hosts: cfg.HTTPHosts, DashboardURL: d.DashboardURL, Limits: cfg.APILimits,
		Metrics:  d.metrics.Handler(),
		Consoles: mgr,
		Storage:  d.storage,
		Images:   d.images,
		Cluster:  d.clusterService(), DefaultBackend: cfg.DefaultBackend,
		Exec: d.monitor, Agents: d.monitor, Guests: d.monitor,
		Recovering: mgr.Recovering})
	if d.unixLn, err = adminapi.ListenUnix(SocketPath(cfg.StateDir)); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	unixLn := d.localConns(d.unixLn, "admin socket")
	go d.serve("admin socket", func() error { return d.api.Serve(unixLn) })

	if err := d.listenTCP(ctx); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	if err := d.listenCluster(); err != nil {
		return nil, fmt.Errorf("starting daemon: %w", err)
	}
	d.dashStats.Store(d.dash) // nil without a TCP listener
	if err := d.plugins.WaitStarted(ctx); err != nil {
		return nil, fmt.Errorf("starting daemon: plugins: %w", err)
	}
	d.startRecovery()
	d.log.Info("guestlinkd started", "version", Version, "state_dir", cfg.StateDir, "socket", SocketPath(cfg.StateDir),
		"http", cfg.HTTPAddr, "https", cfg.HTTPSAddr, "link_port", d.links.Port(), "vsock", d.links.Vsock())
	return d, nil
}

func (d *Daemon) serve(what string, fn func() error) {
	if err := fn(); err != nil {
		d.serving <- fmt.Errorf("serving %s: %w", what, err)
	}
}

// Wait returns when ctx ends or a server stops with an error, then shuts
// the daemon down. Accept errors never stop a server: every listener is
// served through core/listener, which backs off and accepts again (out of
// descriptors, EMFILE, or any other error) and ends only when the listener
// is closed. Guests keep running; the next daemon recovers them.
func (d *Daemon) Wait(ctx context.Context) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-d.serving:
		d.log.Error("daemon stopping", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d.close(sctx)
	return err
}

// startRecovery recovers the instances' guests in the background (the
// second half of instance.Manager.Init), while the APIs serve; close
// cancels it and waits for it.
func (d *Daemon) startRecovery() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d.stopRecovery = func() {
		cancel()
		<-done
	}
	go func() {
		defer close(done)
		t0 := time.Now()
		// The advertisements to the recovered guests' agents wait until
		// every guest is handed to a recovery worker: their TLS handshakes
		// would otherwise slow the plugin calls of the recovery itself
		// (core/agentmon's HoldAdvertisements).
		release := d.monitor.HoldAdvertisements()
		defer release()
		d.mgr.RecoverAll(ctx, release)
		d.log.Info("instances recovered", "took", time.Since(t0).Round(time.Millisecond))
	}()
}

// close undoes Start in reverse order; parts that were never started are
// skipped. Each step is timed: the stop's log line names the steps that
// took long (a daemon of 10,000 guests once spent 22 – 61 s here), so a
// slow stop says where it waited.
func (d *Daemon) close(ctx context.Context) {
	t0 := time.Now()
	var (
		slowMu sync.Mutex
		slow   []any
	)
	step := func(name string, fn func()) {
		s0 := time.Now()
		fn()
		if took := time.Since(s0); took >= slowCloseStep {
			slowMu.Lock()
			slow = append(slow, slog.Duration(name, took.Round(time.Millisecond)))
			slowMu.Unlock()
		}
	}
	// together runs steps at once and returns when all have: parts that
	// do not depend on each other, each of which mostly waits (a server's
	// shutdown for its connections' goroutines to end) or works in the
	// kernel.
	together := func(steps ...func()) {
		var wg sync.WaitGroup
		for _, s := range steps {
			if s != nil {
				wg.Go(s)
			}
		}
		wg.Wait()
	}
	// shutdown stops an HTTP server: its requests in flight get
	// shutdownGrace to be answered, then the stop goes on without them
	// (the process ends their connections as it exits).
	shutdown := func(name string, fn func(context.Context) error) func() {
		return func() {
			step(name, func() {
				gctx, cancel := context.WithTimeout(ctx, shutdownGrace)
				defer cancel()
				if err := fn(gctx); err != nil && d.log != nil {
					d.log.Warn("stopping: requests still in flight", "server", name, "err", err)
				}
			})
		}
	}
	if d.stopRecovery != nil {
		step("recovery", d.stopRecovery)
	}
	// The cluster's heartbeat (a lease write) ends before the writes do.
	if d.stopBeat != nil {
		step("heartbeat", d.stopBeat)
	}
	// The writes end first: a call not yet in a transaction fails at once
	// (a storm's backlog of declarations and agent states is not
	// committed one batch after the other while the stop waits on its
	// callers), what is in flight commits; reads go on until the store
	// closes.
	if d.store != nil {
		step("store_writes", d.store.CloseWrites)
	}
	if d.dash != nil {
		step("dashboard", d.dash.Close) // ends the live streams, which would hold the shutdown
	}
	// The HTTP servers and the guest links close at once: none needs
	// another to close (a link's connection the devlxd server no longer
	// takes is closed, a server's listener closed first refuses new
	// requests), and the stop then waits for the longest of them, not
	// for their sum (the links of 10,000 guests take about 0.3 s to
	// close, 35 µs of CPU each, BenchmarkCloseHybrid; a server ends once
	// its last connection is gone, internal/httpdrain, not at fasthttp's
	// next 100 ms check of them).
	// The links close before the monitors, which then have none left to
	// detach one by one.
	var web, api, links, guests func()
	if d.web != nil {
		web = shutdown("web", func(ctx context.Context) error { return d.webDrain.Shutdown(ctx, d.web.ShutdownWithContext) })
	}
	if d.api != nil {
		api = shutdown("api", d.api.Shutdown)
	}
	if d.links != nil {
		links = func() { step("links", func() { _ = d.links.Close() }) }
	}
	if d.devlxd != nil {
		guests = shutdown("devlxd", d.devlxd.Shutdown)
	}
	together(web, api, links, guests)
	step("tcp", d.closeTCP)
	if d.unixLn != nil {
		_ = os.Remove(SocketPath(d.cfg.StateDir))
	}
	if d.monitor != nil {
		step("agent_monitors", func() { d.monitor.Close() })
	}
	if d.oom != nil {
		step("oom_watches", d.oom.Close)
	}
	if d.plugins != nil {
		step("plugins", func() { _ = d.plugins.Close() })
	}
	if d.metrics != nil {
		step("metrics", d.metrics.Close)
	}
	if d.bus != nil {
		step("events", func() { _ = d.bus.Close() })
	}
	if d.store != nil {
		step("store", func() { _ = d.store.Close() })
	}
	// Last: the next daemon may start once everything is closed.
	if err := d.lock.Release(); err != nil {
		d.log.Warn("releasing the state directory", "err", err)
	}
	if d.log != nil {
		took := time.Since(t0)
		level := slog.LevelInfo
		if took >= slowStop {
			level = slog.LevelWarn // in the log of a daemon run at --log-level warn too
		}
		d.log.Log(context.Background(), level, "guestlinkd stopped", append([]any{slog.Duration("took", took.Round(time.Millisecond))}, slow...)...)
	}
}

// slowCloseStep is how long a step of close takes before the stop's log
// line names it.
const slowCloseStep = 100 * time.Millisecond

// slowStop is how long a stop takes before its log line is a warning
// (issue 28's target for a daemon of 10,000 guests).
const slowStop = 2 * time.Second

// shutdownGrace is how long each HTTP server's requests in flight may take
// to be answered once the stop reached it (the devlxd handlers' calls are
// cancelled, the writes that had not started failed): a request that
// still runs then holds the stop no longer. Before, the stop waited for
// them up to its 20 s bound.
const shutdownGrace = time.Second

// lateHooks forwards to hooks set after the manager was built, and tells
// the OOM watcher of guests that run and stop.
type lateHooks struct {
	h   instance.Hooks
	oom *oomwatch.Watcher
}

func (l *lateHooks) set(h instance.Hooks) { l.h = h }

func (l *lateHooks) GuestRunning(inst *instance.Instance, ep *sdk.LinkEndpoint) {
	if l.oom != nil {
		l.oom.GuestRunning(inst)
	}
	if l.h != nil {
		l.h.GuestRunning(inst, ep)
	}
}

func (l *lateHooks) GuestStopped(inst *instance.Instance) {
	if l.oom != nil {
		l.oom.GuestStopped(inst)
	}
	if l.h != nil {
		l.h.GuestStopped(inst)
	}
}

func (l *lateHooks) GuestReset(inst *instance.Instance) {
	if l.h != nil {
		l.h.GuestReset(inst)
	}
}

func (l *lateHooks) BackendEvent(inst *instance.Instance, ev sdk.Event) {
	if l.h != nil {
		l.h.BackendEvent(inst, ev)
	}
}

func (l *lateHooks) ConfigChanged(inst *instance.Instance, changes []instance.ConfigChange) {
	if l.h != nil {
		l.h.ConfigChanged(inst, changes)
	}
}

func (l *lateHooks) InstanceDeleted(inst *instance.Instance) {
	if l.oom != nil {
		l.oom.InstanceDeleted(inst)
	}
	if dh, ok := l.h.(instance.DeleteHooks); ok {
		dh.InstanceDeleted(inst)
	}
}

func (l *lateHooks) GuestExiting(ctx context.Context, inst *instance.Instance) {
	if xh, ok := l.h.(instance.ExitHooks); ok {
		xh.GuestExiting(ctx, inst)
	}
}

var (
	_ instance.Hooks       = (*lateHooks)(nil)
	_ instance.DeleteHooks = (*lateHooks)(nil)
	_ instance.ExitHooks   = (*lateHooks)(nil)
)

// lateInstances forwards the agent monitor's calls to the manager, which is
// built after the monitor (the monitor is the manager's hooks). It is set
// before anything can call it: plugins start, and so guests run, only later.
type lateInstances struct {
	m *instance.Manager
}

func (l *lateInstances) GetByUUID(ctx context.Context, uuid string) (*instance.Instance, error) {
	return l.m.GetByUUID(ctx, uuid)
}

func (l *lateInstances) SetAgentState(ctx context.Context, uuid string, st instance.AgentState, heartbeat time.Time) error {
	return l.m.SetAgentState(ctx, uuid, st, heartbeat)
}

func (l *lateInstances) RecordHeartbeat(uuid string, st instance.AgentState, heartbeat time.Time) bool {
	return l.m.RecordHeartbeat(uuid, st, heartbeat)
}

func (l *lateInstances) Runtime(ctx context.Context, uuid string) (sdk.Backend, sdk.Handle, error) {
	return l.m.Runtime(ctx, uuid)
}

func (l *lateInstances) GuestThrottled(ctx context.Context, uuid, budget, detail string) error {
	return l.m.GuestThrottled(ctx, uuid, budget, detail)
}

func (l *lateInstances) ReportOOMCounter(ctx context.Context, uuid string, counter uint64) error {
	return l.m.ReportOOMCounter(ctx, uuid, counter)
}

func (l *lateInstances) Declare(ctx context.Context, uuid string, d instance.Declaration, by events.Requestor) error {
	return l.m.Declare(ctx, uuid, d, by)
}

var (
	_ agentmon.Instances         = (*lateInstances)(nil)
	_ agentmon.Throttles         = (*lateInstances)(nil)
	_ agentmon.HeartbeatRecorder = (*lateInstances)(nil)
	_ agentmon.Declarer          = (*lateInstances)(nil)
	_ agentmon.OOMReporter       = (*lateInstances)(nil)
)

func levelOf(l slog.Level) hclog.Level {
	switch {
	case l <= slog.LevelDebug:
		return hclog.Debug
	case l <= slog.LevelInfo:
		return hclog.Info
	case l <= slog.LevelWarn:
		return hclog.Warn
	}
	return hclog.Error
}

// linkDescriptors is the guest links' share of the daemon's open-file limit
// (linkhost.Config.MaxDescriptors): all of it but a tenth, and at least 512
// descriptors, left to the store, the plugins and the API's clients. With
// thousands of guests the links hold a listener each, and their
// connections come and go by the thousand when every guest talks at once.
func linkDescriptors() int {
	limit := openFileLimit()
	if limit == 0 {
		return 0 // unknown or practically unlimited: no bound
	}
	return max(64, limit-max(512, limit/10))
}
