package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// healthMisses is how many failed health pings in a row make a plugin
// hung; they must also span at least two health intervals.
const healthMisses = 3

// errRestartRequested ends a plugin's watch when Restart was called.
var errRestartRequested = errors.New("restart requested")

// managed is one discovered plugin and, unless it is rejected, its
// supervisor's state.
type managed struct {
	h     *Host
	name  string
	path  string
	proxy *proxy
	log   hclog.Logger

	firstDone chan struct{} // closed after the first start attempt
	firstOnce sync.Once
	kick      chan struct{} // wake the watcher: ping now
	restartCh chan struct{} // wake the supervisor: Restart was called
	// heard is set by every event the plugin sends; the watcher clears it
	// at each health interval and skips the ping if it was set: the
	// plugin answered on its stream meanwhile.
	heard atomic.Bool
	pings atomic.Int64 // health pings sent (tests)

	mu         sync.Mutex
	sum        []byte      // the binary's checksum (from SumsFile)
	rejected   error       // why the plugin is not started; set at discovery, cleared by a Restart that verified it
	lateStart  bool        // started by Restart after a rejection at discovery: its guests need Recover
	client     *sdk.Client // the current process, nil while down
	info       *sdk.Info   // from the last successful start
	health     Health
	lastErr    string
	launches   int
	restarts   int
	failures   int           // failed starts and early exits in a row
	nextRetry  time.Time     // when the supervisor starts the plugin again; zero unless waiting
	skipped    int           // health checks not counted: the daemon was saturated
	running    bool          // a supervise goroutine runs
	attempts   int           // launch attempts concluded (running, failed or rejected)
	requested  int           // restart requests made (Restart)
	serving    int           // requests the current launch attempt serves (requested when it began)
	served     int           // requests served by the last attempt that concluded
	attemptCh  chan struct{} // closed and replaced when attempts grows
	restartReq bool
	subs       map[chan sdk.Event]struct{}
}

func newManaged(h *Host, c candidate) *managed {
	m := &managed{
		h:         h,
		name:      c.name,
		path:      c.path,
		sum:       c.sum,
		rejected:  c.rejected,
		log:       h.cfg.Logger.With("plugin", c.name),
		firstDone: make(chan struct{}),
		kick:      make(chan struct{}, 1),
		restartCh: make(chan struct{}, 1),
		attemptCh: make(chan struct{}),
		health:    HealthStarting,
		subs:      map[chan sdk.Event]struct{}{},
	}
	m.proxy = &proxy{m: m}
	if c.rejected != nil {
		m.health = HealthRejected
		m.lastErr = c.rejected.Error()
	} else {
		m.running = true // Start runs supervise next
	}
	return m
}

// rejection returns why the plugin is not started, nil if it may be.
func (m *managed) rejection() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rejected
}

func (m *managed) status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{
		Name:      m.name,
		Path:      m.path,
		Health:    m.health,
		Restarts:  m.restarts,
		LastError: m.lastErr,
		Failures:  m.failures,
	}
	st.SkippedChecks = m.skipped
	if !m.nextRetry.IsZero() {
		t := m.nextRetry
		st.NextRetryAt = &t
	}
	if m.info != nil {
		st.Version = m.info.Version
		st.Capabilities = append([]sdk.Capability(nil), m.info.Capabilities...)
		st.InstanceType = m.info.GuestInstanceType()
		st.ConfigPrefixes = slices.Clone(m.info.ConfigPrefixes)
		st.ConfigSchema = slices.Clone(m.info.ConfigSchema)
		if m.client != nil {
			st.Missing = slices.Clone(m.info.Missing)
		}
	}
	if m.client != nil {
		st.PID = m.client.PID()
	}
	return st
}

// current returns the running plugin process, or nil while there is none.
func (m *managed) current() *sdk.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client
}

// setInfo records the Info the plugin process c just answered, unless c
// is no longer the current process.
func (m *managed) setInfo(c *sdk.Client, info *sdk.Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != c || c == nil {
		return
	}
	was := m.health
	m.setInfoLocked(info)
	switch {
	case was == HealthHealthy && m.health == HealthUnhealthy:
		m.log.Warn("plugin cannot run guests", "missing", sdk.MissingText(info.Missing))
	case was == HealthUnhealthy && m.health == HealthHealthy:
		m.log.Info("plugin can run guests again")
	}
}

// setInfoLocked records the running process's Info and the health it
// implies: unhealthy while the plugin reports something missing; m.mu
// must be held.
func (m *managed) setInfoLocked(info *sdk.Info) {
	m.info = info
	m.health = HealthHealthy
	if len(info.Missing) > 0 {
		m.health = HealthUnhealthy
	}
}

// poke wakes the watcher so it checks the plugin at once.
func (m *managed) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// requestRestart asks for a new plugin process. It reports whether no
// supervisor runs, in which case the caller starts one.
func (m *managed) requestRestart() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requested++
	if m.running {
		m.restartReq = true
		select {
		case m.restartCh <- struct{}{}:
		default:
		}
		return false
	}
	m.running = true
	m.health = HealthRestarting
	if m.launches == 0 {
		m.health = HealthStarting // rejected at discovery, never launched
	}
	return true
}

// concludedLocked records that a launch attempt concluded and wakes
// RestartWait; m.mu must be held.
func (m *managed) concludedLocked() {
	m.attempts++
	m.served = m.serving
	close(m.attemptCh)
	m.attemptCh = make(chan struct{})
}

func (m *managed) setDown(health Health, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.client = nil
	m.health = health
	if err != nil {
		m.lastErr = err.Error()
	}
}

// supervise starts the plugin and keeps it running until ctx ends or its
// binary is rejected. It never gives up on a plugin that fails: it starts
// it again after an exponential backoff (MinBackoff growing 1.5× up to
// MaxBackoff), forever; Restart skips the wait and resets the backoff.
func (m *managed) supervise(ctx context.Context) {
	cfg := &m.h.cfg
	defer func() {
		m.mu.Lock()
		m.running = false
		m.nextRetry = time.Time{}
		m.concludedLocked()
		m.mu.Unlock()
		m.firstOnce.Do(func() { close(m.firstDone) })
	}()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = cfg.MinBackoff
	bo.MaxInterval = cfg.MaxBackoff
	bo.RandomizationFactor = 0.2
	bo.Reset()
	// failed counts a failure, waits out the backoff and reports whether
	// ctx is still live.
	failed := func(err error) bool {
		wait := min(bo.NextBackOff(), cfg.MaxBackoff)
		m.mu.Lock()
		m.failures++
		failures := m.failures
		m.concludedLocked()
		m.client = nil
		m.health = HealthRestarting
		m.lastErr = err.Error()
		m.nextRetry = time.Now().Add(wait)
		m.mu.Unlock()
		m.log.Warn("plugin down, restarting", "in", wait, "failures", failures, "error", err)
		m.firstOnce.Do(func() { close(m.firstDone) })
		ok := m.h.wait(ctx, wait, m.restartCh)
		m.mu.Lock()
		m.nextRetry = time.Time{}
		m.mu.Unlock()
		return ok
	}
	for ctx.Err() == nil {
		m.mu.Lock()
		if m.restartReq {
			m.failures = 0
			bo.Reset()
		}
		m.restartReq = false
		m.serving = m.requested // this attempt begins after every request so far
		m.mu.Unlock()
		select {
		case <-m.restartCh: // served by this launch
		default:
		}
		c, info, err := m.launch(ctx)
		if errors.Is(err, sdk.ErrChecksum) || errors.Is(err, ErrUntrusted) {
			m.log.Error("plugin binary changed or no longer trusted, rejected", "error", err)
			m.setDown(HealthRejected, err)
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !failed(err) {
				break
			}
			continue
		}
		started := time.Now()
		down := m.run(ctx, c, info)
		c.Kill()
		switch {
		case ctx.Err() != nil:
		case errors.Is(down, errRestartRequested):
			m.log.Info("restarting plugin as asked")
			m.setDown(HealthRestarting, nil)
		default:
			if time.Since(started) >= cfg.StableAfter {
				m.mu.Lock()
				m.failures = 0
				m.mu.Unlock()
				bo.Reset()
			}
			if !failed(down) {
				break
			}
		}
	}
	m.setDown(HealthFailed, errors.New("plugin host closed"))
}

// launch starts a plugin process and asks for its Info.
func (m *managed) launch(ctx context.Context) (*sdk.Client, *sdk.Info, error) {
	cfg := &m.h.cfg
	m.mu.Lock()
	m.launches++
	if m.launches > 1 {
		m.restarts++
	}
	sum := m.sum
	m.mu.Unlock()
	if err := CheckTrusted("plugin binary", m.path); err != nil {
		return nil, nil, fmt.Errorf("starting plugin %q: %w", m.name, err)
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c, err := sdk.Launch(lctx, m.path, sdk.LaunchOptions{
		Logger:       cfg.Logger,
		StartTimeout: cfg.StartTimeout,
		Checksum:     sum,
		Env:          cfg.Env,
	})
	if errors.Is(err, sdk.ErrChecksum) {
		return nil, nil, checksumChanged(m.path, sum, err)
	}
	if err != nil {
		return nil, nil, err
	}
	info, err := c.Backend().Info(lctx)
	if err != nil {
		err = exitedDuring(c, fmt.Errorf("asking plugin %q for its info: %w", m.name, err))
		c.Kill()
		return nil, nil, err
	}
	return c, info, nil
}

// run serves one plugin process: it opens the event stream, publishes the
// process, tells the daemon about a restart and watches the process until
// it exits, hangs, a restart is requested or ctx ends. It returns why the
// process is done (nil when ctx ended) and has stopped forwarding events.
func (m *managed) run(ctx context.Context, c *sdk.Client, info *sdk.Info) error {
	evCtx, evCancel := context.WithCancel(ctx)
	forwarded := make(chan struct{})
	defer func() {
		evCancel()
		m.setDown(HealthRestarting, nil)
		<-forwarded
	}()
	events, err := c.Backend().Events(evCtx)
	if err != nil {
		close(forwarded)
		return exitedDuring(c, fmt.Errorf("opening event stream: %w", err))
	}
	go func() {
		defer close(forwarded)
		m.forward(events)
	}()
	m.mu.Lock()
	m.client = c
	m.setInfoLocked(info)
	m.concludedLocked()
	restarted := m.launches > 1 || m.lateStart
	m.lateStart = false
	m.mu.Unlock()
	m.log.Info("plugin running", "pid", c.PID(), "version", info.Version)
	if len(info.Missing) > 0 {
		m.log.Warn("plugin cannot run guests", "missing", sdk.MissingText(info.Missing))
	}
	m.firstOnce.Do(func() { close(m.firstDone) })
	if restarted && m.h.cfg.OnRestart != nil {
		m.h.cfg.OnRestart(m.name)
	}
	return m.watch(ctx, c)
}

// watch waits until the process exits, is hung (fails healthMisses pings in
// a row, spread over two health intervals, while the daemon was not
// saturated), a restart is requested or ctx ends (nil). It pings once per
// health interval a plugin it did not hear from on its event stream in
// that interval, and at once when a call found the plugin unresponsive.
func (m *managed) watch(ctx context.Context, c *sdk.Client) error {
	cfg := &m.h.cfg
	tick := time.NewTicker(cfg.HealthInterval)
	defer tick.Stop()
	misses := 0
	var firstMiss time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			return exitErr(c)
		case <-m.restartCh:
			return errRestartRequested
		case <-m.kick:
		case <-tick.C:
			// An event in the last interval is an answer: the process
			// runs and serves its stream. No ping (a busy plugin's guests
			// send events all the time), unless pings are failing.
			if m.heard.Swap(false) && misses == 0 {
				continue
			}
		}
		m.pings.Add(1)
		info, res, err := ping(ctx, c, cfg.HealthTimeout)
		switch {
		case ctx.Err() != nil:
			return nil
		case c.Exited():
			return exitErr(c)
		case res == pingOK:
			misses = 0
			m.setInfo(c, info)
		case res == pingSaturated:
			m.mu.Lock()
			m.skipped++
			m.mu.Unlock()
			m.log.Warn("plugin health check failed while the daemon is saturated; not counted", "error", err)
		default:
			misses++
			if misses == 1 {
				firstMiss = time.Now()
			}
			m.log.Warn("plugin health check failed", "misses", misses, "error", err)
			if misses >= healthMisses && time.Since(firstMiss) >= 2*cfg.HealthInterval {
				return fmt.Errorf("plugin process %d hung: %d health checks failed, last: %w", c.PID(), misses, err)
			}
		}
	}
}

// exitGrace is how long a call that lost its plugin process waits for
// go-plugin to see the process end: the connection breaks (EOF, reset,
// refused) as the process dies, a little before its wait returns.
const exitGrace = 2 * time.Second

// exitedDuring returns err, a failed call on c, as the process's exit when
// the call failed because the process ended: a plugin that dies while it
// is being started is down because it exited, whichever call noticed
// first. err stays wrapped (its kind and text). Other errors, and an
// unavailable plugin that is still running after exitGrace, are returned
// as they are.
func exitedDuring(c *sdk.Client, err error) error {
	if !errors.Is(err, sdk.ErrUnavailable) {
		return err
	}
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	select {
	case <-c.Done():
	case <-t.C:
		return err
	}
	if !c.Exited() {
		return err
	}
	return fmt.Errorf("%w: %w", exitErr(c), err)
}

func exitErr(c *sdk.Client) error {
	if s := c.Stderr(); s != "" {
		return fmt.Errorf("plugin process %d exited (stderr: %s)", c.PID(), s)
	}
	return fmt.Errorf("plugin process %d exited", c.PID())
}

// forward hands the events of one plugin process to OnEvent and to the
// proxy's subscribers until the stream ends.
func (m *managed) forward(events <-chan sdk.Event) {
	for ev := range events {
		if !m.heard.Load() {
			m.heard.Store(true)
		}
		if f := m.h.cfg.OnEvent; f != nil {
			f(m.name, ev)
		}
		m.mu.Lock()
		for ch := range m.subs {
			select {
			case ch <- ev:
			default:
				m.log.Warn("event subscriber too slow, event dropped", "uuid", ev.UUID, "kind", ev.Kind)
			}
		}
		m.mu.Unlock()
	}
}

// subscribe registers an event subscriber until ctx or the host ends.
func (m *managed) subscribe(ctx context.Context) <-chan sdk.Event {
	ch := make(chan sdk.Event, 256)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-m.h.ctx.Done():
		}
		m.mu.Lock()
		delete(m.subs, ch)
		close(ch)
		m.mu.Unlock()
	}()
	return ch
}

// sleep waits for d, ctx or a wake-up, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}
