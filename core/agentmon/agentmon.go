// Package agentmon watches the agent inside each running guest and keeps it
// pointed at the daemon. Per running instance a monitor reads the guest's
// ring buffer (on every backend event and on a timer that follows the agent's
// state), tracks the agent state (started, connected, stopped, lost) from the
// words the agent writes (link/ringproto), advertises the daemon to the agent
// (PUT /1.0 over the link) until the agent confirms it with CONNECTED, and
// pushes config and device changes to the agent (POST /1.0/events).
//
// One Service implements instance.Hooks and instance.FilesProvider: the
// instance manager tells it when guests run, stop, reboot, change, and asks
// it for the files of each guest's config drive.
package agentmon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/guestlink/guestlink/internal/keylock"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Instances is what the monitor needs from the instance service
// (*instance.Manager implements it).
type Instances interface {
	// GetByUUID returns the instance with the given UUID.
	GetByUUID(ctx context.Context, uuid string) (*instance.Instance, error)
	// SetAgentState records the agent state and, when not zero, the time of
	// the last heartbeat.
	SetAgentState(ctx context.Context, uuid string, st instance.AgentState, heartbeat time.Time) error
	// Runtime returns the backend and handle of a running instance, for
	// reading its ring buffer.
	Runtime(ctx context.Context, uuid string) (contract.Backend, contract.Handle, error)
}

// OOMReporter is an optional interface of Instances (*instance.Manager
// implements it): ReportOOMCounter records the guest's oom_kill counter
// that came with its state (the OutOfMemory condition).
type OOMReporter interface {
	ReportOOMCounter(ctx context.Context, uuid string, counter uint64) error
}

// HeartbeatRecorder is an optional interface of Instances (*instance.Manager
// implements it): RecordHeartbeat records the heartbeat of an agent whose
// state is unchanged, without a context, and reports false when the call
// needs SetAgentState. A daemon of 10,000 guests records 2,000 heartbeats
// a second: this spares each a context and its timer.
type HeartbeatRecorder interface {
	RecordHeartbeat(uuid string, st instance.AgentState, heartbeat time.Time) bool
}

// Links is the host side of the guest links (*linkhost.Host implements it).
type Links interface {
	// Port is the daemon's link port, advertised to agents.
	Port() uint32
	// Attach starts serving a running instance's link.
	Attach(uuid string, ep *contract.LinkEndpoint) error
	// Detach stops serving it.
	Detach(uuid string)
	// DialAgent connects to the agent's link port.
	DialAgent(ctx context.Context, uuid string) (net.Conn, error)
}

// Certs holds the daemon's and the instances' key pairs (*pki.Store
// implements it).
type Certs interface {
	// Daemon is the daemon's certificate, advertised to agents.
	Daemon() *pki.Pair
	// Instance returns an instance's pairs, generating them on first use.
	Instance(name string) (*pki.InstanceCerts, error)
	// DeleteInstance forgets an instance's pairs.
	DeleteInstance(name string) error
}

// Defaults of Config.
const (
	DefaultFastPoll          = 250 * time.Millisecond
	DefaultIdlePoll          = 5 * time.Second
	DefaultStoppedPoll       = time.Second
	DefaultConnectedPoll     = 5 * time.Second
	DefaultHeartbeat         = 5 * time.Second
	DefaultMissedHeartbeats  = 3
	DefaultAdvertiseInterval = time.Second
	DefaultRequestTimeout    = 5 * time.Second
	// RingReadMax is the most bytes read from a ring buffer at once.
	RingReadMax = 4096
	// eventQueue is how many guest events wait per instance at most.
	eventQueue = 256
)

// Config configures a Service. Zero durations take the defaults.
type Config struct {
	Instances Instances // required
	Links     Links     // required
	Certs     Certs     // required
	Logger    *slog.Logger
	// Now is the clock of heartbeats and of certificate validity (default
	// time.Now). Poll timers and the advertisement rate limit use real time.
	Now func() time.Time
	// FastPoll is the ring read period while no agent is known or an
	// advertisement awaits CONNECTED (default 250 ms).
	FastPoll time.Duration
	// IdlePoll is the longest ring read period while no agent is known and
	// nothing is heard (default 5 s): the period doubles from FastPoll up to
	// it, and any word, backend event or advertisement makes it fast again.
	// Backend events (ring data, port opened or closed) read the ring at
	// once, so the timer is only a fallback. With an agent not yet
	// confirmed the period doubles up to StoppedPoll only, and it stays at
	// FastPoll while an accepted advertisement awaits its CONNECTED.
	IdlePoll time.Duration
	// StoppedPoll is the period while the agent is stopped or lost (1 s).
	StoppedPoll time.Duration
	// ConnectedPoll is the period while the agent is connected (5 s).
	ConnectedPoll time.Duration
	// Heartbeat is the agent's heartbeat period (5 s) and MissedHeartbeats
	// how many may pass without a word before the agent is lost (3).
	Heartbeat        time.Duration
	MissedHeartbeats int
	// AdvertiseInterval is the least time between two advertisements to
	// one instance (1 s).
	AdvertiseInterval time.Duration
	// RequestTimeout bounds each ring read and each call to an agent (5 s).
	RequestTimeout time.Duration
	// RingBytesPerSecond and RingLinesPerSecond are each guest's ring read
	// budget over time, RingBurstBytes and RingBurstLines at once
	// (defaults DefaultRing*: 4 KiB and 20 lines per second, bursts of
	// 16 KiB and 100 lines, or 4 s and 5 s of a larger rate); a read costs
	// at least 256 bytes of it. A read over it is dropped without being
	// parsed, reads pause until the budget holds a full read again, and
	// the guest's backend events stop waking the monitor meanwhile; the
	// episode is recorded once through Throttles. RingBurstBytes is at
	// least RingReadMax.
	RingBytesPerSecond float64
	RingBurstBytes     int
	RingLinesPerSecond float64
	RingBurstLines     int
	// StateBudget is the per-instance budget of state changes shared with
	// devlxd PATCH /1.0 (core/statebudget): a ring word that would change
	// the agent state takes one change from it; beyond it the word waits
	// (the last one wins) and the episode is recorded once. Nil makes a
	// Budget with the defaults for this Service alone.
	StateBudget *statebudget.Budget
	// Throttles records throttling episodes (an event and a timeline
	// entry); nil only logs them.
	Throttles Throttles
	// RingObserver is told of every ring read (core/metrics counts them);
	// nil observes nothing.
	RingObserver RingObserver
	// MaxAdvertising is how many of the advertisements (PUT /1.0, each a
	// TLS handshake with an agent) that HoldAdvertisements kept waiting
	// run at once at most once released (DefaultMaxAdvertising if zero);
	// the others wait their turn. Advertisements asked for while nothing
	// holds them are not counted.
	MaxAdvertising int
	// ReportRate is how many refreshes of the agents' reports of their
	// guests (GET /1.0 and /1.0/state, a TLS connection each) start per
	// second at most, on the agents' connections (reports.go); default
	// DefaultReportRate. ReportRetry is the first wait before a report
	// without an address is refreshed again (DefaultReportRetry); it
	// doubles up to 5 minutes, then the retries stop.
	ReportRate  float64
	ReportRetry time.Duration
}

// Service runs one monitor per running instance. Create it with New; Close
// stops every monitor.
type Service struct {
	cfg    Config
	budget *statebudget.Budget
	adv    *advGate // when PUT /1.0 calls may run (advgate.go)
	// reports refreshes the agents' reports on their signals (reports.go).
	reports *refresher

	mu       sync.Mutex
	monitors map[string]*monitor    // by instance UUID
	early    map[string]*pushedRing // ring bytes pushed before the guest's monitor existed (push.go)
	pushers  map[string]bool        // backends that pushed ring bytes (push.go)
	ops      keylock.Map            // an instance operation at a time, by UUID
	batchers map[contract.RingBatchReader]*ringBatcher
	closed   bool

	// stepMu guards idleSteppers, the stepper goroutines waiting for work,
	// the most recently idle last (see runSteps); quit ends them.
	stepMu       sync.Mutex
	idleSteppers []*stepper
	quit         chan struct{}
	quitOnce     sync.Once

	// sweepMu guards sweep, the one timer that checks the steady monitors'
	// heartbeats (liveness.go), and sweepDone, set by Close.
	sweepMu   sync.Mutex
	sweep     *time.Timer
	sweepDone bool
}

// stepper is a goroutine that runs monitors' steps; work hands it the next
// monitor (buffered: the one who took it off the idle stack sends once).
type stepper struct{ work chan *monitor }

// stepperIdle is how long a stepper goroutine waits for another monitor's
// steps before it ends.
const stepperIdle = 2 * time.Second

// runSteps runs m.steps on the most recently idle stepper goroutine, or on
// a new one when none is idle. A stepper waits stepperIdle for more work
// before it ends; taking the most recent one first (a stack) lets the
// others run out their wait, so there are about as many steppers as steps
// run at once, not as many as start within stepperIdle (taken in turn
// from a queue, 2,000 steps a second kept ~4,000 steppers alive). Each
// keeps the stack it grew, where a goroutine per step grew (copied) its
// stack at every heartbeat.
func (s *Service) runSteps(m *monitor) {
	s.stepMu.Lock()
	if n := len(s.idleSteppers); n > 0 {
		st := s.idleSteppers[n-1]
		s.idleSteppers[n-1] = nil
		s.idleSteppers = s.idleSteppers[:n-1]
		s.stepMu.Unlock()
		st.work <- m // buffered, and only this call sends to st now
		return
	}
	s.stepMu.Unlock()
	go s.stepper(&stepper{work: make(chan *monitor, 1)}, m)
}

// stepper runs monitors' steps until it waited stepperIdle for more, or
// the Service closed.
func (s *Service) stepper(st *stepper, m *monitor) {
	idle := time.NewTimer(stepperIdle)
	defer idle.Stop()
	for {
		m.steps()
		s.stepMu.Lock()
		s.idleSteppers = append(s.idleSteppers, st)
		s.stepMu.Unlock()
		idle.Reset(stepperIdle)
		select {
		case m = <-st.work:
			continue
		case <-idle.C:
		case <-s.quit:
		}
		s.stepMu.Lock()
		i := slices.Index(s.idleSteppers, st)
		if i >= 0 {
			s.idleSteppers = slices.Delete(s.idleSteppers, i, i+1)
		}
		s.stepMu.Unlock()
		if i < 0 {
			// runSteps took this stepper meanwhile: its monitor is coming.
			m = <-st.work
			continue
		}
		return
	}
}

// lockInstance serialises GuestRunning and GuestStopped of one instance, so
// its link is attached and detached in the order the calls came, without
// holding Service.mu (and stalling every other instance) while attaching;
// it returns the lock's release.
func (s *Service) lockInstance(uuid string) (unlock func()) { return s.ops.Lock(uuid) }

var (
	_ instance.Hooks         = (*Service)(nil)
	_ instance.FilesProvider = (*Service)(nil)
	_ instance.ExitHooks     = (*Service)(nil)
)

// New returns a Service with no monitor running.
func New(cfg Config) (*Service, error) {
	if cfg.Instances == nil || cfg.Links == nil || cfg.Certs == nil {
		return nil, errors.New("agent monitor: Instances, Links and Certs are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.FastPoll, DefaultFastPoll)
	def(&cfg.IdlePoll, DefaultIdlePoll)
	def(&cfg.StoppedPoll, DefaultStoppedPoll)
	def(&cfg.ConnectedPoll, DefaultConnectedPoll)
	def(&cfg.Heartbeat, DefaultHeartbeat)
	def(&cfg.AdvertiseInterval, DefaultAdvertiseInterval)
	def(&cfg.RequestTimeout, DefaultRequestTimeout)
	if cfg.MissedHeartbeats <= 0 {
		cfg.MissedHeartbeats = DefaultMissedHeartbeats
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RingObserver == nil {
		cfg.RingObserver = noRingObserver{}
	}
	if cfg.RingBytesPerSecond <= 0 {
		cfg.RingBytesPerSecond = DefaultRingBytesPerSecond
	}
	if cfg.RingBurstBytes <= 0 {
		cfg.RingBurstBytes = max(DefaultRingBurstBytes, int(min(4*cfg.RingBytesPerSecond, 1<<30)))
	}
	cfg.RingBurstBytes = max(cfg.RingBurstBytes, RingReadMax)
	if cfg.RingLinesPerSecond <= 0 {
		cfg.RingLinesPerSecond = DefaultRingLinesPerSecond
	}
	if cfg.RingBurstLines <= 0 {
		cfg.RingBurstLines = max(DefaultRingBurstLines, int(min(5*cfg.RingLinesPerSecond, 1<<30)))
	}
	if cfg.StateBudget == nil {
		cfg.StateBudget = statebudget.New(0, 0)
	}
	if cfg.MaxAdvertising <= 0 {
		cfg.MaxAdvertising = DefaultMaxAdvertising
	}
	if cfg.ReportRate <= 0 {
		cfg.ReportRate = DefaultReportRate
	}
	def(&cfg.ReportRetry, DefaultReportRetry)
	adv := newAdvGate(cfg.MaxAdvertising)
	return &Service{cfg: cfg, budget: cfg.StateBudget, adv: adv, reports: newRefresher(cfg.ReportRate, adv),
		monitors: map[string]*monitor{},
		batchers: map[contract.RingBatchReader]*ringBatcher{}, quit: make(chan struct{})}, nil
}

// Advertisement returns what the daemon advertises to the agent of inst:
// the host CID, the current link port, the daemon certificate and whether
// devlxd is enabled.
func (s *Service) Advertisement(inst *instance.Instance) *advert.Advertisement {
	return &advert.Advertisement{
		CID:         linkhost.HostCID,
		Port:        s.cfg.Links.Port(),
		Certificate: string(s.cfg.Certs.Daemon().CertPEM),
		Devlxd:      guestview.DevlxdEnabled(inst.Config),
	}
}

// Files of the config drive.
const (
	FileAgentCert  = "agent.crt"
	FileAgentKey   = "agent.key"
	FileServerCert = "server.crt"
	FileAgentConf  = "agent.conf"
)

// GuestFiles returns the agent's files for inst's config drive: its
// certificate and key (agent.crt, agent.key 0600), the daemon client
// certificate it must accept (server.crt) and the current advertisement
// (agent.conf). The key pairs are generated on the first call.
func (s *Service) GuestFiles(_ context.Context, inst *instance.Instance) ([]contract.File, error) {
	c, err := s.cfg.Certs.Instance(inst.Name)
	if err != nil {
		return nil, fmt.Errorf("guest files of instance %q: %w", inst.Name, err)
	}
	return []contract.File{
		{Path: FileAgentCert, Mode: 0o644, Data: c.Agent.CertPEM},
		{Path: FileAgentKey, Mode: 0o600, Data: c.Agent.KeyPEM},
		{Path: FileServerCert, Mode: 0o644, Data: c.Client.CertPEM},
		{Path: FileAgentConf, Mode: 0o644, Data: s.Advertisement(inst).Marshal()},
	}, nil
}

// GuestRunning attaches the instance's link, starts its monitor (or keeps the
// running one) and advertises the daemon right away, which covers a daemon
// restart: the agent learns the new port and re-declares its state.
// Attaching (which may wait seconds for a serial link) holds only this
// instance's lock: other instances' monitors carry on meanwhile.
func (s *Service) GuestRunning(inst *instance.Instance, ep *contract.LinkEndpoint) {
	unlock := s.lockInstance(inst.UUID)
	defer unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	if ep != nil {
		if err := s.cfg.Links.Attach(inst.UUID, ep); err != nil {
			s.cfg.Logger.Error("agentmon: attaching link", "instance", inst.Name, "kind", ep.Kind, "err", err)
		}
	}
	// The instance's key pairs (four files read and parsed) are loaded
	// before the Service's lock is taken: the recovery workers of a
	// restarted daemon call GuestRunning for every running guest at once,
	// and loading them under it made each wait for the others' loads (and
	// every other user of the lock, a list's every row, wait too). Only
	// this instance's lock (lockInstance) is held meanwhile.
	var certs *pki.InstanceCerts
	if s.monitor(inst.UUID) == nil {
		var err error
		if certs, err = s.cfg.Certs.Instance(inst.Name); err != nil {
			s.cfg.Logger.Error("agentmon: loading key pairs; not monitoring", "instance", inst.Name, "err", err)
			return
		}
	}
	s.mu.Lock()
	if s.closed {
		// Close ran while attaching and detached only what it knew of.
		s.mu.Unlock()
		s.cfg.Links.Detach(inst.UUID)
		return
	}
	defer s.mu.Unlock()
	if m := s.monitors[inst.UUID]; m != nil {
		m.requestAdvert(true)
		return
	}
	m := newMonitor(s, inst, certs)
	s.monitors[inst.UUID] = m
	s.takeEarlyLocked(m, inst.Backend)
	m.start()
	m.requestAdvert(true)
}

// GuestStopped stops the instance's monitor and closes its link. It waits
// for a GuestRunning of the instance under way, so the link ends detached.
func (s *Service) GuestStopped(inst *instance.Instance) {
	unlock := s.lockInstance(inst.UUID)
	defer unlock()
	s.mu.Lock()
	m := s.monitors[inst.UUID]
	delete(s.monitors, inst.UUID)
	delete(s.early, inst.UUID)
	s.mu.Unlock()
	if m != nil {
		m.halt()
	}
	s.cfg.Links.Detach(inst.UUID)
}

// GuestExiting takes in the last ring words of a guest whose process
// ended before the manager records its end (instance.ExitHooks): one more
// read of its ring, which a backend keeps after the guest's process is gone
// (docs/plugins.md), so an agent's STOPPED written just before the power-off
// is in the timeline.
func (s *Service) GuestExiting(ctx context.Context, inst *instance.Instance) {
	if m := s.monitor(inst.UUID); m != nil {
		m.readLastWords(ctx)
	}
}

// GuestReset forgets the agent of a guest that rebooted: its state is none
// until the new boot's agent writes to the ring. The link stays attached
// (the guest runs on) and the monitor goes on watching.
func (s *Service) GuestReset(inst *instance.Instance) {
	if m := s.monitor(inst.UUID); m != nil {
		m.wake(&m.wakeReset)
	}
}

// BackendEvent makes the instance's monitor read the ring buffer now when
// the event may mean new words (ring data, a port opened or closed).
func (s *Service) BackendEvent(inst *instance.Instance, ev contract.Event) {
	switch ev.Kind {
	case contract.EventRingData, contract.EventPortOpened, contract.EventPortClosed:
	default:
		return
	}
	if ev.Kind == contract.EventRingData && ev.RingSeq != 0 && s.push(inst.Backend, inst.UUID, ev.Ring, ev.RingSeq) {
		return // a steady monitor's heartbeat, taken in (liveness.go)
	}
	if m := s.monitor(inst.UUID); m != nil {
		m.kickRead()
	}
}

// ConfigChanged pushes user.* changes and device changes to the agent as
// events, and re-advertises when security.devlxd changed. Events that do
// not fit the instance's queue are dropped with one warning per call.
func (s *Service) ConfigChanged(inst *instance.Instance, changes []instance.ConfigChange) {
	m := s.monitor(inst.UUID)
	if m == nil {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	dropped := 0
	for _, ch := range changes {
		switch {
		case ch.Key == "security.devlxd":
			m.requestAdvert(true)
		case strings.HasPrefix(ch.Key, "user."), strings.HasPrefix(ch.Key, "readiness.probe."):
			if !m.queueEvent(devlxdapi.EventConfig, now, devlxdapi.ConfigEvent{Key: ch.Key, OldValue: ch.OldValue, Value: ch.Value}) {
				dropped++
			}
		}
	}
	for _, ev := range m.deviceChanges(inst) {
		if !m.queueEvent(devlxdapi.EventDevice, now, ev) {
			dropped++
		}
	}
	if dropped > 0 {
		// One warning per change, however many events it dropped.
		s.cfg.Logger.Warn("agentmon: guest event queue full, dropping events", "instance", inst.Name, "dropped", dropped)
	}
}

// DeleteInstance forgets a deleted instance: stops its monitor, closes its
// link and deletes its key pairs. The daemon calls it after the instance
// manager deleted the instance.
func (s *Service) DeleteInstance(inst *instance.Instance) error {
	s.GuestStopped(inst)
	if err := s.cfg.Certs.DeleteInstance(inst.Name); err != nil {
		return fmt.Errorf("forgetting instance %q: %w", inst.Name, err)
	}
	return nil
}

// InstanceDeleted forgets a deleted instance: its monitor, its link and its
// key pairs (instance.DeleteHooks).
func (s *Service) InstanceDeleted(inst *instance.Instance) {
	if err := s.DeleteInstance(inst); err != nil {
		s.cfg.Logger.Error("agentmon: forgetting a deleted instance", "instance", inst.Name, "err", err)
	}
}

// AgentState returns what the monitor of a running instance knows of its
// agent, and false when the instance is not monitored.
func (s *Service) AgentState(uuid string) (instance.AgentState, bool) {
	m := s.monitor(uuid)
	if m == nil {
		return instance.AgentNone, false
	}
	return m.currentState(), true
}

// Close stops every monitor and waits for them.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	ms := make([]*monitor, 0, len(s.monitors))
	for uuid, m := range s.monitors {
		ms = append(ms, m)
		delete(s.monitors, uuid)
	}
	s.mu.Unlock()
	for _, m := range ms {
		m.halt()
		s.cfg.Links.Detach(m.uuid)
	}
	for _, m := range ms {
		m.wait()
	}
	s.reports.close()
	s.stopSweep()
	s.quitOnce.Do(func() { close(s.quit) })
	return nil
}

func (s *Service) monitor(uuid string) *monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.monitors[uuid]
}

// marshalEvent builds a guest event with the given metadata.
func marshalEvent(typ, timestamp string, meta any) ([]byte, error) {
	raw, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	return json.Marshal(devlxdapi.Event{Type: typ, Timestamp: timestamp, Metadata: raw})
}
