// Package simbackend is the sim backend: guests are ordinary local processes,
// each run by a simulated VMM (package simvm) in a session of its own, with a
// stand-in /dev (virtio-serial ports as FIFOs, /dev/lxd), a config drive, a
// QEMU-style ring buffer and a hybrid link socket. The backend talks to VMMs
// only through their control sockets, so a restarted plugin re-attaches to
// running guests with Recover.
//
// Files by concern: backend.go (Options, New, Info, Create), lifecycle.go
// (Start, Stop, Delete), state.go (State, Recover and what a VMM reports),
// events.go (VMM subscriptions to backend events), ring.go (ReadRing,
// LinkEndpoint), handle.go, config.go.
package simbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// running binary, Agent is sdk.AgentPath's ($GUESTLINK_PLUGIN_AGENT, else
// bin/guestlink-agent for a binary at bin/plugins/sim), DataDir comes from
// DefaultDataDir.
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
		Agent:      sdk.AgentPath(exe),
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
	env    []string // the VMMs' environment: simvm.VMMEnv, nothing of the plugin's

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
		env:      simvm.VMMEnv(),
		watchers: map[string]*watcher{},
		events:   eventer.New(log),
		locks:    map[string]chan struct{}{},
	}, nil
}

// Info describes the backend.
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	return &sdk.Info{
		Name:           Name,
		Version:        Version,
		Capabilities:   []sdk.Capability{sdk.CapRingBuffer, sdk.CapLinkHybrid, sdk.CapLinkSerial, sdk.CapRecover, sdk.CapSnapshot},
		ConfigPrefixes: []string{ConfigPrefix},
		ConfigSchema:   Schema,
		// A sim guest is a host process, not a machine with its own kernel.
		InstanceType: sdk.InstanceTypeContainer,
	}, nil
}

// Create makes the guest directory and returns its handle.
func (b *Backend) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if spec == nil {
		return nil, fmt.Errorf("creating guest: no spec: %w", sdk.ErrInvalid)
	}
	// Logged first, so a debug log shows every Create the plugin got, also
	// one it refuses (the daemon's tests prove a refused launch never
	// reached it).
	b.log.Debug("create called", "name", spec.Name)
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

// LinkEndpoint returns the guest's hybrid link socket, or its serial link's
// socket when the guest was started with sim.link=serial.
func (b *Backend) LinkEndpoint(ctx context.Context, raw sdk.Handle) (*sdk.LinkEndpoint, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("finding link endpoint: %w", err)
	}
	if cfg, err := simvm.ReadConfig(h.paths()); err == nil && cfg.Link == simvm.LinkSerial {
		return &sdk.LinkEndpoint{Kind: sdk.LinkSerial, Path: h.paths().SerialLink()}, nil
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: h.paths().Link()}, nil
}
