// Package simbackend is the sim backend: guests are ordinary local processes,
// each run by a simulated VMM (package simvm) in a session of its own, with a
// stand-in /dev (virtio-serial ports as FIFOs, /dev/lxd), a config drive, a
// QEMU-style ring buffer and a hybrid link socket. The backend talks to VMMs
// only through their control sockets, so a restarted plugin re-attaches to
// running guests with Recover.
package simbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/eventer"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// Name is the backend's name.
const Name = "sim"

// Version is the backend's version.
const Version = "0.1.0"

// DataDirEnv names the environment variable holding the plugin's data
// directory, set by the daemon.
const DataDirEnv = sdk.DataDirEnv

// DefaultStopTimeout is the graceful stop budget when StopOptions.Timeout is
// zero.
const DefaultStopTimeout = 30 * time.Second

// killWait bounds the wait for a VMM to end after quit.
const killWait = 10 * time.Second

// maxSocketPath is the longest Unix socket path Linux accepts.
const maxSocketPath = sdk.MaxSocketPath

// Details keys of GuestState.
const (
	DetailDevlxdSocket = "devlxd_socket"
	DetailLayout       = "layout"
	DetailConsoleLog   = "console_log"
	DetailGuestDir     = "guest_dir"
	DetailGuestPID     = "guest_pid"
	DetailBoot         = "boot"
	DetailRingSize     = "ring_size"
	DetailExitStatus   = "exit_status"
)

// Options configures a Backend.
type Options struct {
	// DataDir holds the guest directories (under DataDir/guests).
	DataDir string
	// Executable is the binary a VMM runs as ("<Executable> vmm <dir>"):
	// normally the plugin binary itself.
	Executable string
	// Agent is the default guestlink-agent path (config key sim.agent
	// overrides it).
	Agent string
	// Logger receives the backend's logs; nil discards them.
	Logger hclog.Logger
}

// DefaultOptions returns the options of the plugin binary: Executable is the
// running binary, Agent is bin/guestlink-agent for a binary at
// bin/plugins/sim, DataDir comes from DefaultDataDir.
func DefaultOptions() (Options, error) {
	exe, err := os.Executable()
	if err != nil {
		return Options{}, fmt.Errorf("finding the plugin binary: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return Options{
		DataDir:    DefaultDataDir(),
		Executable: exe,
		Agent:      filepath.Join(filepath.Dir(filepath.Dir(exe)), "guestlink-agent"),
	}, nil
}

// DefaultDataDir returns $GUESTLINK_PLUGIN_DATA_DIR, else
// $XDG_RUNTIME_DIR/guestlink-sim, else <temp dir>/guestlink-sim-<uid>.
func DefaultDataDir() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "guestlink-sim")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("guestlink-sim-%d", os.Getuid()))
}

// Backend is the sim backend. It is safe for concurrent use.
type Backend struct {
	opts   Options
	guests string // DataDir/guests
	log    hclog.Logger
	env    []string // the VMMs' environment

	mu       sync.Mutex
	watchers map[string]*watcher      // by guest directory
	events   *eventer.Eventer         // open Events streams
	locks    map[string]chan struct{} // per guest directory: Start, Stop and Delete take turns
}

// lockGuest serialises Start, Stop and Delete of one guest within this
// process (the VMM's own lock covers other processes). It honours ctx.
func (b *Backend) lockGuest(ctx context.Context, h *handle) (unlock func(), err error) {
	b.mu.Lock()
	ch, ok := b.locks[h.Dir]
	if !ok {
		ch = make(chan struct{}, 1)
		b.locks[h.Dir] = ch
	}
	b.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("guest %q is busy: %w", h.ID, ctx.Err())
	}
}

var _ sdk.Backend = (*Backend)(nil)

// New returns a Backend; it creates the data directory (0700).
func New(opts Options) (*Backend, error) {
	if opts.DataDir == "" || opts.Executable == "" {
		return nil, errors.New("sim backend: data dir and executable are required")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("sim backend data dir %q: %w", opts.DataDir, err)
	}
	guests := filepath.Join(dir, "guests")
	if err := os.MkdirAll(guests, 0o700); err != nil {
		return nil, fmt.Errorf("sim backend data dir: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Backend{
		opts:     opts,
		guests:   guests,
		log:      log,
		env:      vmmEnv(os.Environ()),
		watchers: map[string]*watcher{},
		events:   eventer.New(log),
		locks:    map[string]chan struct{}{},
	}, nil
}

// vmmEnv drops go-plugin's variables (the magic cookie among them) so
// neither a VMM nor a guest believes it is a plugin.
func vmmEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == sdk.Handshake.MagicCookieKey || strings.HasPrefix(k, "PLUGIN_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Info describes the backend.
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	return &sdk.Info{
		Name:           Name,
		Version:        Version,
		Capabilities:   []sdk.Capability{sdk.CapRingBuffer, sdk.CapLinkHybrid, sdk.CapRecover},
		ConfigPrefixes: []string{ConfigPrefix},
	}, nil
}

// Create makes the guest directory and returns its handle.
func (b *Backend) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if spec == nil {
		return nil, fmt.Errorf("creating guest: no spec: %w", sdk.ErrInvalid)
	}
	if err := validateSpec(spec); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	id, err := newID(spec.Name)
	if err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	h := &handle{V: handleVersion, ID: id, Dir: filepath.Join(b.guests, id), Name: spec.Name, UUID: spec.UUID}
	if l := len(h.paths().Link() + "_65535"); l > maxSocketPath {
		return nil, fmt.Errorf("creating guest %q: socket paths under %s would be %d bytes, over the limit of %d; use a shorter %s: %w",
			spec.Name, h.Dir, l, maxSocketPath, DataDirEnv, sdk.ErrInvalid)
	}
	if err := os.Mkdir(h.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if err := writeMarker(h); err != nil {
		os.RemoveAll(h.Dir)
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	b.log.Info("guest created", "name", spec.Name, "dir", h.Dir)
	return h.encode(), nil
}

func validateSpec(spec *sdk.GuestSpec) error {
	if _, err := parseConfig(spec.Config); err != nil {
		return err
	}
	for _, f := range spec.Files {
		if err := simvm.ValidateFilePath(f.Path); err != nil {
			return fmt.Errorf("%w: %w", err, sdk.ErrInvalid)
		}
	}
	return nil
}

// newID returns a guest directory name: the instance name (made safe and
// short) and 8 random hex digits.
func newID(name string) (string, error) {
	var safe strings.Builder
	for _, r := range strings.ToLower(name) {
		if safe.Len() >= 20 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			safe.WriteRune(r)
		}
	}
	s := strings.Trim(safe.String(), "-")
	if s == "" {
		s = "guest"
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("making guest id: %w", err)
	}
	return s + "-" + hex.EncodeToString(rnd[:]), nil
}

// guest decodes a handle and checks its directory, which must be a guest
// directory of this backend's data dir: a handle naming any other directory
// is sdk.ErrInvalid, so a crafted handle cannot make the backend stop or
// delete what is not its own.
func (b *Backend) guest(raw sdk.Handle) (*handle, error) {
	h, err := decodeHandle(raw)
	if err != nil {
		return nil, err
	}
	if filepath.Dir(h.Dir) != b.guests {
		return nil, fmt.Errorf("guest %q: directory %s is outside the data dir %s: %w", h.ID, h.Dir, b.guests, sdk.ErrInvalid)
	}
	if err := checkDir(h); err != nil {
		return nil, err
	}
	return h, nil
}

// Start launches the guest's VMM, subscribes to its events and lets it run
// the guest command.
func (b *Backend) Start(ctx context.Context, raw sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	if spec == nil {
		return nil, nil, fmt.Errorf("starting guest %q: no spec: %w", h.ID, sdk.ErrInvalid)
	}
	if err := validateSpec(spec); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	if spec.RestoreState {
		return nil, nil, fmt.Errorf("starting guest %q: restoring saved state: %w", h.ID, sdk.ErrNotSupported)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	defer unlock()
	gc, _ := parseConfig(spec.Config)
	p := h.paths()
	client := simvm.NewClient(p)
	if _, err := liveStatus(ctx, p); err == nil {
		return nil, nil, fmt.Errorf("starting guest %q: already running: %w", h.ID, sdk.ErrConflict)
	} else if !errors.Is(err, simvm.ErrNotRunning) {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	if err := waitVMMGone(ctx, p); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	agent := gc.Agent
	if agent == "" {
		agent = b.opts.Agent
	}
	if gc.Command == DefaultCommand {
		if _, err := os.Stat(agent); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: the default command runs the agent, but %s is missing (build it or set %s): %w",
				h.ID, agent, KeyAgent, sdk.ErrInvalid)
		}
	}
	name := spec.Name
	if name == "" {
		name = h.Name
	}
	cfg := &simvm.Config{Name: name, UUID: h.UUID, Command: gc.Command, Agent: agent, Layout: gc.Layout, RingSize: gc.RingSize}
	for _, f := range spec.Files {
		cfg.Files = append(cfg.Files, simvm.File{Path: f.Path, Mode: f.Mode, Data: f.Data})
	}
	if err := simvm.WriteConfig(p, cfg); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	pid, err := simvm.Launch(ctx, b.opts.Executable, p, b.env)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	h.VMMPID = pid
	if err := b.watch(ctx, h); err != nil {
		_ = client.Execute(context.Background(), simvm.CmdQuit, nil, nil)
		return nil, nil, fmt.Errorf("starting guest %q: subscribing to vmm events: %w", h.ID, err)
	}
	var st simvm.Status
	if err := client.Execute(ctx, simvm.CmdCont, nil, &st); err != nil {
		_ = client.Execute(context.Background(), simvm.CmdQuit, nil, nil)
		return nil, nil, fmt.Errorf("starting guest %q: %w", h.ID, err)
	}
	b.log.Info("guest started", "name", name, "vmm_pid", pid, "guest_pid", st.GuestPID)
	return h.encode(), runningState(p, &st), nil
}

// Stop shuts the guest down: powerdown, then quit once the timeout passed
// (at once with Force). It returns when the VMM has ended. Stopping a
// stopped or deleted guest succeeds.
func (b *Backend) Stop(ctx context.Context, raw sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	h, err := b.guest(raw)
	if errors.Is(err, errGone) {
		return &sdk.GuestState{Status: sdk.StatusStopped}, nil // deleted: nothing runs
	}
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	if opts.Stateful {
		return nil, fmt.Errorf("stopping guest %q statefully: %w", h.ID, sdk.ErrNotSupported)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	defer unlock()
	p := h.paths()
	client := simvm.NewClient(p)
	sub, err := client.Subscribe(ctx)
	if errors.Is(err, simvm.ErrNotRunning) {
		return b.stoppedState(h, true)
	}
	if err != nil {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	defer sub.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := sub.Next(); err != nil {
				return
			}
		}
	}()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if !opts.Force {
		err := client.Execute(ctx, simvm.CmdPowerdown, nil, nil)
		var ce *simvm.CommandError
		switch {
		case err == nil:
			t := time.NewTimer(timeout)
			select {
			case <-ended:
				t.Stop()
				if err := waitVMMGone(ctx, p); err != nil {
					return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
				}
				return b.stoppedState(h, false)
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("stopping guest %q: %w", h.ID, ctx.Err())
			case <-t.C:
				b.log.Info("guest did not power down in time, killing it", "dir", h.Dir, "timeout", timeout)
			}
		case errors.As(err, &ce), errors.Is(err, simvm.ErrNotRunning):
			// Paused or already exiting: quit settles it.
		default:
			return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
		}
	}
	if err := client.Execute(ctx, simvm.CmdQuit, nil, nil); err != nil && !errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-ended:
	case <-ctx.Done():
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("stopping guest %q: vmm did not end within %v after quit", h.ID, killWait)
	}
	if err := waitVMMGone(ctx, p); err != nil {
		return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
	}
	return b.stoppedState(h, false)
}

// Delete removes a stopped guest's directory.
func (b *Backend) Delete(ctx context.Context, raw sdk.Handle) error {
	h, err := b.guest(raw)
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	unlock, err := b.lockGuest(ctx, h)
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	defer unlock()
	if _, err := liveStatus(ctx, h.paths()); err == nil {
		return fmt.Errorf("deleting guest %q: still running: %w", h.ID, sdk.ErrConflict)
	} else if !errors.Is(err, simvm.ErrNotRunning) {
		return fmt.Errorf("deleting guest %q: %w", h.ID, err)
	}
	if err := os.RemoveAll(h.Dir); err != nil {
		return fmt.Errorf("deleting guest %q: %w", h.ID, err)
	}
	b.mu.Lock()
	delete(b.locks, h.Dir)
	b.mu.Unlock()
	b.log.Info("guest deleted", "dir", h.Dir)
	return nil
}

// State reports the guest's state.
func (b *Backend) State(ctx context.Context, raw sdk.Handle) (*sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("reading guest state: %w", err)
	}
	return b.state(ctx, h)
}

func (b *Backend) state(ctx context.Context, h *handle) (*sdk.GuestState, error) {
	p := h.paths()
	st, err := liveStatus(ctx, p)
	if err == nil {
		return runningState(p, st), nil
	}
	if !errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("reading state of guest %q: %w", h.ID, err)
	}
	return b.stoppedState(h, false)
}

// shutdownWait bounds the wait for a VMM that is already shutting down.
const shutdownWait = 15 * time.Second

// liveStatus returns the status of p's VMM. A VMM whose guest has ended but
// which is still delivering its last events counts as gone: liveStatus
// waits for it to finish and returns simvm.ErrNotRunning.
func liveStatus(ctx context.Context, p simvm.Paths) (*simvm.Status, error) {
	c := simvm.NewClient(p)
	deadline := time.Now().Add(shutdownWait)
	for {
		st, err := c.Status(ctx)
		if err != nil || st.State != simvm.StateShutdown {
			return st, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vmm %d still shutting down after %v", st.VMMPID, shutdownWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitVMMGone waits, at most killWait, for an exiting VMM's process to end.
func waitVMMGone(ctx context.Context, p simvm.Paths) error {
	ctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	return simvm.WaitUnlocked(ctx, p)
}

// runningState describes a running VMM.
func runningState(p simvm.Paths, st *simvm.Status) *sdk.GuestState {
	d := baseDetails(p)
	d[DetailLayout] = string(st.Layout)
	d[DetailGuestPID] = strconv.Itoa(st.GuestPID)
	d[DetailBoot] = strconv.Itoa(st.Boot)
	d[DetailRingSize] = strconv.Itoa(st.RingSize)
	return &sdk.GuestState{Status: sdk.StatusRunning, PID: int64(st.VMMPID), Details: d}
}

func baseDetails(p simvm.Paths) map[string]string {
	return map[string]string{
		DetailDevlxdSocket: p.DevlxdSocket(),
		DetailConsoleLog:   p.Console(),
		DetailGuestDir:     p.Dir,
	}
}

// stoppedState describes a guest whose VMM does not answer: stopped with its
// exit record, stopped if it never ran, or an error when a VMM ran and ended
// without recording an exit (it was killed). With settle, an error state is
// settled into a stopped one by writing the missing record (Stop of a
// crashed guest).
func (b *Backend) stoppedState(h *handle, settle bool) (*sdk.GuestState, error) {
	p := h.paths()
	d := baseDetails(p)
	cfg, cfgErr := simvm.ReadConfig(p)
	if cfgErr == nil {
		d[DetailLayout] = string(cfg.Layout)
	}
	rec, err := simvm.ReadExitRecord(p)
	switch {
	case err == nil:
		d[DetailExitStatus] = rec.Status
		st := &sdk.GuestState{Status: sdk.StatusStopped, Details: d}
		if rec.Reason == simvm.ReasonError {
			st.Message = rec.Message
		}
		return st, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading state of guest %q: %w", h.ID, err)
	case errors.Is(cfgErr, os.ErrNotExist):
		return &sdk.GuestState{Status: sdk.StatusStopped, Details: d}, nil // never started
	}
	msg := fmt.Sprintf("vmm (pid %d) ended without recording how the guest ended; see %s", h.VMMPID, p.VMMLog())
	if settle {
		if n := simvm.KillStrays(p); n > 0 {
			b.log.Info("killed processes left over by a lost vmm", "dir", h.Dir, "count", n)
		}
		rec := &simvm.ExitRecord{Reason: simvm.ReasonError, Status: "vmm lost", Code: -1, Message: msg, VMMPID: h.VMMPID, ExitedAt: time.Now()}
		if err := simvm.WriteExitRecord(p, rec); err != nil {
			return nil, fmt.Errorf("stopping guest %q: %w", h.ID, err)
		}
		d[DetailExitStatus] = rec.Status
		return &sdk.GuestState{Status: sdk.StatusStopped, Message: msg, Details: d}, nil
	}
	return &sdk.GuestState{Status: sdk.StatusError, Message: msg, Details: d}, nil
}

// ReadRing consumes up to max bytes of the guest's ring buffer.
func (b *Backend) ReadRing(ctx context.Context, raw sdk.Handle, max int) ([]byte, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	if max <= 0 {
		return nil, fmt.Errorf("reading ring buffer of guest %q: size must be greater than zero, got %d: %w", h.ID, max, sdk.ErrInvalid)
	}
	data, err := b.ringReader(h).ReadRing(ctx, max)
	if errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("reading ring buffer of guest %q: not running: %w", h.ID, sdk.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of guest %q: %w", h.ID, err)
	}
	return data, nil
}

// ringReader returns the kept control connection of h's VMM while this
// process watches it (the guest runs), else a client that dials per read.
func (b *Backend) ringReader(h *handle) interface {
	ReadRing(ctx context.Context, size int) ([]byte, error)
} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w, ok := b.watchers[h.Dir]; ok {
		return w.ctl
	}
	return simvm.NewClient(h.paths())
}

// LinkEndpoint returns the guest's hybrid link socket.
func (b *Backend) LinkEndpoint(ctx context.Context, raw sdk.Handle) (*sdk.LinkEndpoint, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("finding link endpoint: %w", err)
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: h.paths().Link()}, nil
}

// Recover re-attaches to the guest's VMM, if it runs, and reports its state.
func (b *Backend) Recover(ctx context.Context, raw sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	st, err := b.state(ctx, h)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest %q: %w", h.ID, err)
	}
	if st.Status == sdk.StatusRunning {
		h.VMMPID = int(st.PID)
		if err := b.watch(ctx, h); err != nil && !errors.Is(err, simvm.ErrNotRunning) {
			return nil, nil, fmt.Errorf("recovering guest %q: subscribing to vmm events: %w", h.ID, err)
		}
		b.log.Info("guest recovered", "dir", h.Dir, "vmm_pid", h.VMMPID)
	}
	return h.encode(), st, nil
}
