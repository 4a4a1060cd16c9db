// Package pluginhost is the daemon's side of the backend plugins: it finds
// them in the plugin directory, verifies their checksums, starts each as a
// child process through the SDK, supervises it (restarting a crashed or hung
// plugin with exponential backoff) and hands the daemon one stable Backend
// per plugin whose calls always have a deadline and return errdefs
// error kinds.
//
// WriteChecksums is not called by the daemon, which only reads SHA256SUMS:
// tests and installers use it to trust the plugins they put in a directory.
package pluginhost

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// DefaultDir is the plugin directory when Config.Dir is empty.
const DefaultDir = "bin/plugins"

// Health is a plugin's condition as List reports it.
type Health string

// Plugin health values.
const (
	// HealthHealthy: the plugin process runs and answers.
	HealthHealthy Health = "healthy"
	// HealthUnhealthy: the plugin process runs and answers, but reports
	// that the host lacks something it needs (Status.Missing: a program, a
	// firmware file, with the Debian package that provides it). Calls
	// that create or start guests are refused (the Backend's Usable);
	// the others go through, so existing guests can be stopped and
	// deleted. The plugin turns healthy at the first health ping after the
	// host was fixed, without a restart.
	HealthUnhealthy Health = "unhealthy"
	// HealthStarting: the plugin's first launch attempt is under way (the
	// daemon serves its API meanwhile: Launch, then WaitStarted; or Restart
	// started a plugin rejected at discovery). A call made meanwhile waits
	// for the attempt to conclude.
	HealthStarting Health = "starting"
	// HealthRestarting: the plugin is down after it ran or tried to (it
	// crashed, hung, failed to start, or a restart was asked for) and the
	// supervisor is starting it again.
	HealthRestarting Health = "restarting"
	// HealthFailed: the plugin host was closed; nothing restarts the
	// plugin any more. (The supervisor never gives up while the host runs:
	// a plugin that keeps failing stays "restarting", with its last error
	// and the time of its next attempt.)
	HealthFailed Health = "failed"
	// HealthRejected: the binary's checksum is missing or wrong, or a path
	// is not trusted (CheckTrusted); it is not started until a Restart
	// verifies it again.
	HealthRejected Health = "rejected"
)

// Status is the state of one plugin.
type Status struct {
	Name         string           `json:"name"`         // the binary's file name
	Path         string           `json:"path"`         // the binary
	Version      string           `json:"version"`      // from Info, once started
	Capabilities []sdk.Capability `json:"capabilities"` // from Info, once started
	// InstanceType is what the plugin's guests are, from Info once started:
	// "container" or "virtual-machine" (sdk.Info.GuestInstanceType).
	InstanceType string `json:"instance_type,omitempty"`
	Health       Health `json:"health"`
	// Missing is what the running plugin reports the host lacks (health
	// "unhealthy"); empty otherwise.
	Missing   []sdk.Missing `json:"missing,omitempty"`
	Restarts  int           `json:"restarts"`   // launches after the first one
	LastError string        `json:"last_error"` // why it last failed, "" if never
	PID       int           `json:"pid"`        // the plugin process, 0 when down
	// Failures counts the failed starts and early exits in a row; the wait
	// before the next attempt grows with each (MinBackoff to MaxBackoff).
	Failures int `json:"failures"`
	// NextRetryAt is when the supervisor starts the plugin again, set while
	// it waits (health "restarting"); Restart skips the wait.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	// SkippedChecks counts the health checks that failed while the daemon
	// itself was saturated (its goroutines ran late): they are not held
	// against the plugin.
	SkippedChecks int `json:"skipped_checks"`
	// ConfigPrefixes and ConfigSchema are the instance config keys the
	// plugin owns and declares, from Info once started.
	ConfigPrefixes []string        `json:"config_prefixes,omitempty"`
	ConfigSchema   []sdk.ConfigKey `json:"config_schema,omitempty"`
}

// Config configures a Host. Zero durations take the defaults shown.
type Config struct {
	// Dir is the plugin directory (DefaultDir); each executable file in it
	// is one backend named by its file name, verified against SumsFile.
	Dir string
	// Logger receives the host's and the plugins' logs; nil discards them.
	Logger hclog.Logger
	// StartTimeout bounds a plugin's start-up handshake and first Info
	// (10s).
	StartTimeout time.Duration
	// CallTimeout bounds every call that has no longer budget (30s).
	CallTimeout time.Duration
	// LongCallTimeout bounds Start, Stop and Recover when the caller's
	// context has no deadline (5m). Stop also gets at least its graceful
	// timeout plus CallTimeout.
	LongCallTimeout time.Duration
	// HealthInterval is how often a running plugin is pinged with Info (5s);
	// HealthTimeout bounds each ping (5s). Three failed pings in a row,
	// spread over at least two intervals, count as a hung plugin, which is
	// killed and restarted. A ping that failed while the daemon itself was
	// saturated (its runnable goroutines waited for a CPU longer than the
	// ping could allow, or the ping returned well after its deadline) is not
	// counted: see Status.SkippedChecks.
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// MinBackoff and MaxBackoff bound the exponential wait between restarts
	// (500ms, 1m). The supervisor never gives up: a plugin that keeps
	// failing is started again every MaxBackoff, forever.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// StableAfter is how long a plugin must run for its failure count (and
	// so its backoff) to be reset (30s).
	StableAfter time.Duration
	// Env are extra environment variables for plugin processes.
	Env []string
	// OnEvent receives every backend event, from one goroutine per plugin.
	// It must not block for long.
	OnEvent func(backend string, ev sdk.Event)
	// OnRestart is called after a plugin process was restarted and its
	// event stream re-opened, so the daemon calls Recover for that
	// backend's guests. It is called from the plugin's supervisor and may
	// call the backend.
	OnRestart func(backend string)
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	def(&c.StartTimeout, 10*time.Second)
	def(&c.CallTimeout, 30*time.Second)
	def(&c.LongCallTimeout, 5*time.Minute)
	def(&c.HealthInterval, 5*time.Second)
	def(&c.HealthTimeout, 5*time.Second)
	def(&c.MinBackoff, 500*time.Millisecond)
	def(&c.MaxBackoff, time.Minute)
	def(&c.StableAfter, 30*time.Second)
}

// Host runs the backend plugins of one daemon.
type Host struct {
	cfg    Config
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wait sleeps between restarts: it waits for d, ctx or a wake-up and
	// reports whether ctx is still live. Tests replace it (fake clock).
	wait func(ctx context.Context, d time.Duration, wake <-chan struct{}) bool

	mu      sync.Mutex
	plugins map[string]*managed
	started bool
}

// New returns a Host for cfg. Nothing runs until Start.
func New(cfg Config) *Host {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Host{cfg: cfg, ctx: ctx, cancel: cancel, wait: sleep, plugins: map[string]*managed{}}
}

// Start discovers the plugins, starts every one whose checksum is right and
// returns once each has answered or failed its first start (or ctx ended);
// the supervisors keep running until Close. A plugin that fails to start is
// not an error of Start: List shows it. Start fails only if the directory
// cannot be read or Start was already called. It is Launch, then
// WaitStarted.
func (h *Host) Start(ctx context.Context) error {
	if err := h.Launch(); err != nil {
		return err
	}
	return h.WaitStarted(ctx)
}

// Launch discovers the plugins and starts every one whose checksum is right,
// without waiting for them: from its return List and Backend know every
// plugin, and a call to a backend waits for its plugin's first start. It
// fails only if the directory cannot be read or the host was already
// launched.
func (h *Host) Launch() error {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return fmt.Errorf("starting plugin host: already started: %w", errdefs.ErrConflict)
	}
	h.started = true
	h.mu.Unlock()
	cands, err := discover(h.cfg.Dir)
	if err != nil {
		return fmt.Errorf("starting plugins in %q: %w", h.cfg.Dir, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cands {
		m := newManaged(h, c)
		h.plugins[c.name] = m
		if c.rejected != nil {
			h.cfg.Logger.Error("plugin rejected", "plugin", c.name, "error", c.rejected)
			continue
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			m.supervise(h.ctx)
		}()
	}
	return nil
}

// WaitStarted returns once every plugin Launch started has answered or
// failed its first start, or with ctx's error.
func (h *Host) WaitStarted(ctx context.Context) error {
	h.mu.Lock()
	ms := slices.Collect(maps.Values(h.plugins))
	h.mu.Unlock()
	for _, m := range ms {
		if m.rejection() != nil {
			continue // never started
		}
		select {
		case <-m.firstDone:
		case <-ctx.Done():
			return fmt.Errorf("starting plugins in %q: %w", h.cfg.Dir, ctx.Err())
		}
	}
	return nil
}

// Backend returns the stable Backend of the named plugin. It stays valid
// across plugin restarts: calls go to the current process and fail fast
// with ErrUnavailable (errdefs and sdk kinds) while there is none. An unknown
// name is errdefs.ErrNotFound; a rejected plugin is errdefs.ErrUnavailable.
func (h *Host) Backend(name string) (sdk.Backend, error) {
	h.mu.Lock()
	m, ok := h.plugins[name]
	names := slices.Sorted(maps.Keys(h.plugins))
	h.mu.Unlock()
	if !ok {
		avail := strings.Join(names, ", ")
		if avail == "" {
			avail = "none"
		}
		return nil, fmt.Errorf("backend %q (available: %s): %w", name, avail, errdefs.ErrNotFound)
	}
	if err := m.rejection(); err != nil {
		return nil, unavailable(fmt.Errorf("backend %q is rejected: %w", name, err))
	}
	return m.proxy, nil
}

// InstanceType returns what the guests of the named backend are, as its
// Info declared ("container" or "virtual-machine"); "virtual-machine" for an
// unknown backend or one not started yet (the older plugins' meaning).
func (h *Host) InstanceType(backend string) string {
	h.mu.Lock()
	m, ok := h.plugins[backend]
	h.mu.Unlock()
	if !ok {
		return sdk.InstanceTypeVM
	}
	if t := m.status().InstanceType; t != "" {
		return t
	}
	return sdk.InstanceTypeVM
}

// List returns the state of every discovered plugin, sorted by name.
func (h *Host) List() []Status {
	h.mu.Lock()
	ms := make([]*managed, 0, len(h.plugins))
	for _, m := range h.plugins {
		ms = append(ms, m)
	}
	h.mu.Unlock()
	out := make([]Status, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Restart kills the named plugin's process if it runs and starts a new one
// now, also when the supervisor was waiting to retry: the failure count and
// the backoff are reset. The daemon's OnRestart follows as for any restart.
//
// The binary is verified again first, as at discovery: trusted paths and a
// checksum read anew from SumsFile. So a rejected plugin whose binary or
// checksum was fixed is started, and a plugin upgraded together with its
// checksum runs the new binary. A plugin that fails the check is not
// restarted (a running process keeps running): the error says why.
func (h *Host) Restart(name string) error {
	h.mu.Lock()
	m, ok := h.plugins[name]
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("restarting backend %q: %w", name, errdefs.ErrNotFound)
	}
	if h.ctx.Err() != nil {
		return unavailable(fmt.Errorf("restarting backend %q: plugin host closed", name))
	}
	c, err := verify(h.cfg.Dir, name)
	if err == nil {
		err = c.rejected
	}
	if err != nil {
		m.mu.Lock()
		if m.client == nil && !m.running {
			m.lastErr = err.Error()
		}
		m.mu.Unlock()
		return unavailable(fmt.Errorf("restarting backend %q: rejected: %w", name, err))
	}
	m.mu.Lock()
	if m.rejected != nil && m.launches == 0 {
		m.lateStart = true // never ran: the daemon has not recovered its guests
	}
	m.sum, m.rejected = c.sum, nil
	m.mu.Unlock()
	if m.requestRestart() {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			m.supervise(h.ctx)
		}()
	}
	return nil
}

// RestartWait is Restart, then waits until the new launch attempt concluded
// (the plugin runs, failed to start, or was rejected) or ctx ends, and
// returns the plugin's status then. A ctx that ends first is not an error:
// the restart goes on and the status says where it is.
func (h *Host) RestartWait(ctx context.Context, name string) (Status, error) {
	h.mu.Lock()
	m, ok := h.plugins[name]
	h.mu.Unlock()
	if !ok {
		return Status{}, fmt.Errorf("restarting backend %q: %w", name, errdefs.ErrNotFound)
	}
	// An attempt that began before the request (a process started as the
	// backoff ran out) may conclude first: wait for one that began after it.
	// A supervisor that ended (a rejected binary) serves nothing more.
	m.mu.Lock()
	req, gen := m.requested+1, m.attempts
	m.mu.Unlock()
	if err := h.Restart(name); err != nil {
		return m.status(), err
	}
	for {
		m.mu.Lock()
		done := m.served >= req || (!m.running && m.attempts > gen)
		ch := m.attemptCh
		m.mu.Unlock()
		if done {
			return m.status(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return m.status(), nil
		}
	}
}

// Close stops supervising, kills every plugin process and waits until they
// are gone. Guests keep running. Calls made afterwards fail with
// ErrUnavailable.
func (h *Host) Close() error {
	h.cancel()
	h.wg.Wait()
	return nil
}
