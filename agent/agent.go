// Package agent is the in-guest agent: it announces itself on the
// ring-buffer port, serves the daemon on the link port (8443) and proxies
// /dev/lxd/sock to the daemon's devlxd handlers.
//
// Lifecycle: Run loads the certificates and the boot state, brings
// /dev/lxd/sock up early from agent.conf when it enables devlxd, listens on
// the link port, writes STARTED and then, every heartbeat period, its current
// word (STARTED until an advertisement is validated, then CONNECTED, back to
// STARTED when the daemon becomes unreachable). When its context ends it
// closes its sockets, writes STOPPED and returns.
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/guestlink/guestlink/agent/bootstate"
	"github.com/guestlink/guestlink/agent/control"
	"github.com/guestlink/guestlink/agent/devlxdproxy"
	"github.com/guestlink/guestlink/agent/eventhub"
	agentexec "github.com/guestlink/guestlink/agent/exec"
	"github.com/guestlink/guestlink/agent/features"
	"github.com/guestlink/guestlink/agent/files"
	"github.com/guestlink/guestlink/agent/fsfreeze"
	"github.com/guestlink/guestlink/agent/gueststate"
	"github.com/guestlink/guestlink/agent/ringwriter"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/link/transport"
)

// Files of the config directory (delivered by the config drive).
const (
	// AgentCertFile is the agent's certificate (server on 8443, client
	// towards the daemon).
	AgentCertFile = "agent.crt"
	// AgentKeyFile is the agent's private key (0600).
	AgentKeyFile = "agent.key"
	// ServerCertFile is the daemon's per-instance client certificate that
	// the link port accepts.
	ServerCertFile = "server.crt"
	// ConfFile is the advertisement written by the daemon at every start.
	ConfFile = "agent.conf"
)

// Defaults of Config.
const (
	// DefaultHeartbeat is the heartbeat period.
	DefaultHeartbeat = 5 * time.Second
	// ValidateTimeout bounds the reachability check of an advertisement.
	ValidateTimeout = 5 * time.Second
	// DaemonCheckBeats is how many heartbeat periods the agent lets pass
	// without hearing from the daemon before it checks that the daemon's
	// link still accepts (Config.DaemonCheck's default: 5 min with the
	// default heartbeat). Long: the check only turns the word back to
	// STARTED, and a restarted daemon advertises itself to every running
	// guest anyway; every check is an accept for the daemon (at 30 s, 333
	// a second at 10,000 guests, a third of the idle budget of issue 28).
	DaemonCheckBeats = 60
)

// Config configures an Agent. Paths are absolute (already under the root).
type Config struct {
	// Root is the guest root every path below lives under.
	Root string
	// ConfigDir holds agent.crt, agent.key, server.crt and agent.conf.
	ConfigDir string
	// StateDir holds the boot state.
	StateDir string
	// VirtioPortsDir is where the ring-buffer ports are
	// (<root>/dev/virtio-ports).
	VirtioPortsDir string
	// DevlxdSocket is the devlxd socket path (<root>/dev/lxd/sock).
	DevlxdSocket string
	// Link is the guest side of the link.
	Link transport.Guest
	// Heartbeat is the heartbeat period (DefaultHeartbeat if zero).
	Heartbeat time.Duration
	// DaemonCheck is how long the agent goes without hearing from the
	// daemon (an advertisement, an answered request) before it checks, at
	// the next heartbeat, that the daemon's link still accepts
	// connections; a refusal sends it back to STARTED. Zero means
	// DaemonCheckBeats heartbeat periods. The check opens a connection and
	// closes it without a request, so that a daemon with thousands of
	// guests neither holds a connection per guest nor answers a request
	// per guest and heartbeat.
	DaemonCheck time.Duration
	// PerRequestTLS disables connection reuse towards the daemon.
	PerRequestTLS bool
	// BootID identifies this boot of the guest; empty means the kernel's
	// (see bootstate.BootID). A simulated guest passes one per boot.
	BootID string
	// Version is reported by GET /1.0 on the link port.
	Version string
	// Log receives the agent's log; nil discards it.
	Log *slog.Logger
	// OnDevlxdUp, if set, is called each time the devlxd socket starts
	// answering (guestlink-agent run sends systemd READY=1 from it).
	OnDevlxdUp func()
}

// Agent is one running agent. Create it with New and run it with Run.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	ring   *ringwriter.Writer
	up     *upstream.Client
	hub    *eventhub.Hub
	devlxd *devlxdproxy.Server
	bootID string
	cert   tls.Certificate

	features *features.Switch  // the guest admin's switch (/etc/guestlink-agent.yaml)
	freezer  *fsfreeze.Freezer // POST /1.0/freeze and /1.0/thaw; thawed when Run returns

	kick chan struct{} // asks the ring goroutine to write the word now

	probeKick chan struct{} // asks the probe loop to re-read its configuration (probes.go)

	advMu sync.Mutex // serialises advertisements

	mu          sync.Mutex
	word        ringproto.Word
	boot        bootstate.State
	lastReached time.Time
}

var _ control.Agent = (*Agent)(nil)

// New loads the certificates and the boot state and returns an agent ready
// to Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.DaemonCheck <= 0 {
		cfg.DaemonCheck = DaemonCheckBeats * cfg.Heartbeat
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(cfg.ConfigDir, AgentCertFile), filepath.Join(cfg.ConfigDir, AgentKeyFile))
	if err != nil {
		return nil, fmt.Errorf("loading agent key pair from %s: %w", cfg.ConfigDir, err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.ConfigDir, AgentKeyFile)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("agent key is readable by others", "path", filepath.Join(cfg.ConfigDir, AgentKeyFile), "mode", fi.Mode().Perm())
	}
	bootID := cfg.BootID
	if bootID == "" {
		if bootID, err = bootstate.BootID(cfg.Root); err != nil {
			return nil, err
		}
	}
	boot, err := bootstate.Load(cfg.StateDir, bootID)
	if err != nil {
		log.Warn("ignoring boot state", "err", err)
	}
	a := &Agent{
		cfg:    cfg,
		log:    log,
		ring:   &ringwriter.Writer{Dir: cfg.VirtioPortsDir},
		up:     upstream.New(upstream.Options{Link: cfg.Link, Certificate: cert, PerRequestTLS: cfg.PerRequestTLS}),
		hub:    &eventhub.Hub{},
		bootID: bootID,
		cert:   cert,

		features: features.New(cfg.Root),
		freezer:  fsfreeze.New(cfg.Root, log.With("component", "fsfreeze")),
		kick:     make(chan struct{}, 1),

		probeKick: make(chan struct{}, 1),
		word:      ringproto.Started,
		boot:      boot,
	}
	a.devlxd = &devlxdproxy.Server{
		Path: cfg.DevlxdSocket,
		Handler: &devlxdproxy.Handler{
			Upstream:      a.up,
			Events:        a.hub,
			OnDeclared:    a.declared,
			OnUnreachable: a.unreachable,
			OnReached:     a.reached,
			Log:           log.With("component", "devlxd"),
		},
	}
	return a, nil
}

// loadServerCert reads server.crt and returns its DER bytes.
func (a *Agent) loadServerCert() ([]byte, error) {
	path := filepath.Join(a.cfg.ConfigDir, ServerCertFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading daemon client certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("reading daemon client certificate %s: no PEM CERTIFICATE block", path)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("parsing daemon client certificate %s: %w", path, err)
	}
	return block.Bytes, nil
}

// initialAdvertisement returns the advertisement to start with: the last one
// validated during this boot, else agent.conf from the config drive.
func (a *Agent) initialAdvertisement() *advert.Advertisement {
	if len(a.boot.Advertisement) > 0 {
		if adv, err := advert.Parse(a.boot.Advertisement); err == nil {
			return adv
		}
	}
	path := filepath.Join(a.cfg.ConfigDir, ConfFile)
	data, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.log.Warn("reading agent.conf", "path", path, "err", err)
		}
		return nil
	}
	adv, err := advert.Parse(data)
	if err != nil {
		a.log.Warn("ignoring agent.conf", "path", path, "err", err)
		return nil
	}
	return adv
}

// Run runs the agent until ctx ends, then writes STOPPED and returns. It
// fails early if the link port cannot be served.
func (a *Agent) Run(ctx context.Context) error {
	serverDER, err := a.loadServerCert()
	if err != nil {
		return err
	}
	if adv := a.initialAdvertisement(); adv != nil {
		if err := a.up.SetAdvertisement(adv); err != nil {
			a.log.Warn("ignoring initial advertisement", "err", err)
		} else if adv.Devlxd {
			if err := a.devlxd.Start(); err != nil {
				a.log.Error("starting devlxd socket early", "err", err)
			} else {
				a.log.Info("devlxd socket up from agent.conf", "path", a.cfg.DevlxdSocket)
				a.devlxdUp()
			}
		}
	}
	defer a.stopDevlxd()
	defer a.freezer.Close() // a freeze never outlives the agent

	ln, err := a.cfg.Link.Listen(control.Port)
	if err != nil {
		return fmt.Errorf("listening on %s link port %d: %w", a.cfg.Link.Kind(), control.Port, err)
	}
	srv := &http.Server{
		Handler: &control.Handler{Agent: a, Exec: &agentexec.Server{Root: a.cfg.Root, Log: a.log.With("component", "exec")},
			Files: files.New(a.cfg.Root), Features: a.features, State: &gueststate.Collector{Root: a.cfg.Root}, Freeze: a.freezer},
		TLSConfig:         control.TLSConfig(a.cert, serverDER),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	a.log.Info("listening on the link", "link", a.cfg.Link.Kind(), "port", control.Port)

	probeCtx, stopProbes := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		a.probeLoop(probeCtx)
	}()
	defer func() {
		stopProbes()
		<-probeDone
	}()

	ringDone := make(chan struct{})
	ringCtx, stopRing := context.WithCancel(context.Background())
	go func() {
		defer close(ringDone)
		a.ringLoop(ringCtx)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serving link port: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	stopRing()
	<-ringDone
	a.stopDevlxd()
	if err := a.ring.Write(ringproto.Stopped); err != nil {
		a.log.Warn("writing STOPPED", "err", err)
	}
	a.log.Info("stopped")
	return runErr
}

// devlxdUp tells Config.OnDevlxdUp that the devlxd socket answers.
func (a *Agent) devlxdUp() {
	if a.cfg.OnDevlxdUp != nil {
		a.cfg.OnDevlxdUp()
	}
}

func (a *Agent) stopDevlxd() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.devlxd.Stop(ctx); err != nil {
		a.log.Warn("stopping devlxd socket", "err", err)
	}
}

// ringLoop writes the current word at once, on every kick and every
// heartbeat period, checking the daemon's link first while CONNECTED and
// nothing was heard from the daemon for Config.DaemonCheck.
func (a *Agent) ringLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	failing := false
	for {
		word := a.Word()
		if err := a.ring.Write(word); err != nil {
			if !failing {
				a.log.Warn("ring write failed (repeats are not logged)", "word", word, "err", err)
			}
			failing = true
		} else if failing {
			a.log.Info("ring write works again", "word", word)
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-t.C:
			a.checkDaemon(ctx)
		}
	}
}

// checkDaemon checks that the daemon's link accepts while CONNECTED if
// nothing was heard from the daemon for Config.DaemonCheck; a failure goes
// back to STARTED. The daemon's identity was proven when its advertisement
// was validated and is proven again by every request: the check only
// finds a daemon that went away (its link refuses).
func (a *Agent) checkDaemon(ctx context.Context) {
	a.mu.Lock()
	need := a.word == ringproto.Connected && time.Since(a.lastReached) >= a.cfg.DaemonCheck
	a.mu.Unlock()
	if !need {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, min(a.cfg.Heartbeat, 3*time.Second))
	defer cancel()
	if err := a.up.Reach(pctx); err != nil {
		if ctx.Err() == nil {
			a.unreachable(err)
		}
		return
	}
	a.reached()
}

// Word returns the agent's current ring word.
func (a *Agent) Word() ringproto.Word {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.word
}

func (a *Agent) setWord(w ringproto.Word) {
	a.mu.Lock()
	changed := a.word != w
	a.word = w
	a.mu.Unlock()
	if changed {
		a.log.Info("agent state", "word", w)
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) reached() {
	a.mu.Lock()
	a.lastReached = time.Now()
	a.mu.Unlock()
}

// unreachable goes back to STARTED after a request to the daemon failed,
// unless it only timed out or was shed: a daemon that is slow (thousands of guests
// declaring at once) is still there, and re-advertising to every guest
// whose request it was slow to answer would only add to its load. A
// refused or broken connection (the daemon went away) counts; the guest
// gets its error either way.
func (a *Agent) unreachable(err error) {
	if timedOut(err) || errors.Is(err, upstream.ErrShed) {
		// Nor when it closed the connection before its TLS handshake
		// (upstream.ErrShed): a daemon shedding a storm's connections. A
		// 10,000-guest storm made thousands of agents go back to STARTED
		// on that, each then re-advertised to and re-declared: more
		// handshakes for the daemon that was already shedding.
		a.log.Debug("daemon slow to answer; staying connected", "err", err)
		return
	}
	if a.Word() == ringproto.Connected {
		a.log.Warn("daemon unreachable, waiting for a new advertisement", "err", err)
		a.setWord(ringproto.Started)
	}
}

// declared records a declaration of the guest that the daemon accepted.
func (a *Agent) declared(put devlxdapi.StatePut) {
	a.mu.Lock()
	a.boot.Declared, a.boot.DeclaredReason, a.boot.DeclaredMessage = put.State, put.Reason, put.Message
	if adv := a.up.Advertisement(); adv != nil {
		a.boot.DeclaredTo = adv.Marshal()
	}
	s := a.boot
	a.mu.Unlock()
	if err := bootstate.Save(a.cfg.StateDir, s); err != nil {
		a.log.Warn("saving declared state", "err", err)
	}
}

// Advertise validates adv: it points the upstream client at the daemon,
// checks GET /1.0 (200 or 403), writes CONNECTED, starts or stops the
// devlxd socket, and gives the daemon back the guest's last declared state
// of this boot: in the answer whenever inAnswer (the daemon asks while it
// has none, and records it itself: no PATCH), else re-sent with PATCH /1.0
// before answering when the daemon is another than the one declared to.
func (a *Agent) Advertise(ctx context.Context, adv *advert.Advertisement, inAnswer bool) (*devlxdapi.StatePut, error) {
	a.advMu.Lock()
	defer a.advMu.Unlock()
	if cur := a.up.Advertisement(); !adv.Equal(cur) {
		if err := a.up.SetAdvertisement(adv); err != nil {
			return nil, fmt.Errorf("using advertisement: %w", err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, ValidateTimeout)
	defer cancel()
	if err := a.up.Probe(pctx); err != nil {
		a.log.Warn("advertised daemon unreachable", "cid", adv.CID, "port", adv.Port, "err", err)
		return nil, fmt.Errorf("%w: cid %d port %d: %w", control.ErrUnreachable, adv.CID, adv.Port, err)
	}
	a.reached()
	a.log.Info("advertisement validated", "cid", adv.CID, "port", adv.Port, "devlxd", adv.Devlxd)

	a.mu.Lock()
	a.boot.Advertisement = adv.Marshal()
	// The daemon that asks for the declaration in the answer asks because
	// it does not have it (it started since, or its last record of it
	// failed), whatever daemon the guest declared to; one that does not
	// ask gets a PATCH when it is another daemon than the one declared to.
	var redeclare devlxdapi.StatePut
	if a.boot.Declared != "" {
		prev, err := advert.Parse(a.boot.DeclaredTo)
		if inAnswer || err != nil || !prev.SameDaemon(adv) {
			redeclare = devlxdapi.StatePut{State: a.boot.Declared, Reason: a.boot.DeclaredReason, Message: a.boot.DeclaredMessage}
		}
	}
	s := a.boot
	a.mu.Unlock()
	if err := bootstate.Save(a.cfg.StateDir, s); err != nil {
		a.log.Warn("saving advertisement", "err", err)
	}
	// Re-declaring before answering the PUT means the daemon has the
	// guest's state back by the time it learns the agent is connected. A
	// daemon that asked for it in the answer records it from there: it
	// holds one of its bounded advertisement slots for this PUT, and a
	// PATCH (another connection, a full TLS handshake with a daemon that
	// just started) would hold the slot until its store write committed.
	var inAnswerDecl *devlxdapi.StatePut
	switch {
	case redeclare.State != "" && inAnswer:
		a.log.Info("handing the guest's state back to the daemon", "state", redeclare.State, "reason", redeclare.Reason)
		a.declared(redeclare)
		inAnswerDecl = &redeclare
	case redeclare.State != "":
		a.redeclare(ctx, redeclare)
	}

	a.setWord(ringproto.Connected)
	a.kickProbes()
	if adv.Devlxd {
		if err := a.devlxd.Start(); err != nil {
			a.log.Error("starting devlxd socket", "err", err)
		} else {
			a.devlxdUp()
		}
	} else {
		a.stopDevlxd()
	}
	return inAnswerDecl, nil
}

// redeclare re-sends PATCH /1.0 with the guest's last declaration (state,
// reason and message) to a new daemon. A failure is logged, not returned:
// the advertisement stands.
func (a *Agent) redeclare(ctx context.Context, put devlxdapi.StatePut) {
	state := put.State
	body, _ := json.Marshal(put)
	ctx, cancel := context.WithTimeout(ctx, ValidateTimeout)
	defer cancel()
	env, err := a.up.Do(ctx, http.MethodPatch, "/1.0", body)
	switch {
	case err != nil:
		a.log.Warn("re-declaring guest state", "state", state, "err", err)
	case env.Type == devlxdapi.TypeError:
		a.log.Warn("re-declaring guest state refused", "state", state, "code", env.ErrorCode, "error", env.Error)
	default:
		a.log.Info("re-declared guest state to the new daemon", "state", state, "reason", put.Reason)
		a.declared(put)
	}
}

// Publish hands e to the /1.0/events subscribers.
func (a *Agent) Publish(e devlxdapi.Event) {
	if probeConfigEvent(e) {
		a.kickProbes()
	}
	n := a.hub.Publish(e)
	a.log.Debug("event", "type", e.Type, "subscribers", n)
}

// Info describes the agent for GET /1.0 on the link port.
func (a *Agent) Info() devlxdapi.AgentInfo {
	return devlxdapi.AgentInfo{
		Version: a.cfg.Version,
		BootID:  a.bootID,
		State:   string(a.Word()),
		Devlxd:  a.devlxd.Running(),

		Features: a.features.Enabled(),
	}
}

// timedOut reports whether err is a timeout rather than a refusal or a
// broken connection.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
