// Package fleetbackend is the fleet backend's guests (docs/fleet.md):
// thousands of simulated guests in one process, each running the real agent
// (package agent, as a library) against its own QEMU-semantics ring buffer
// (plugins/shared/ringbuffer) fed through a FIFO standing in for the
// virtio-serial port, its own hybrid link socket and its own devlxd socket,
// exactly as a sim guest has them. Backend implements sdk.Backend in the
// process that holds the guests (the fleet host, see package fleethost).
package fleetbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/eventer"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
)

// Name is the backend's name.
const Name = "fleet"

// Version is the backend's version.
const Version = "0.1.0"

// DefaultStopTimeout is the graceful stop budget when the daemon gives none.
const DefaultStopTimeout = 30 * time.Second

// RingSize is the size of every guest's ring buffer (LXD's).
const RingSize = 16

// Details of GuestState (the sim backend's names).
const (
	DetailDevlxdSocket = "devlxd_socket"
	DetailLayout       = "layout"
	DetailGuestDir     = "guest_dir"
	DetailBoot         = "boot"
	DetailRingSize     = "ring_size"
	DetailExitStatus   = "exit_status"
)

// Exit statuses reported in DetailExitStatus and in EventExited's Detail.
const (
	ExitClean   = "exit status 0"
	ExitKilled  = "signal: killed"
	ExitCrashed = "crashed"
)

// Backend holds the guests of one fleet host process.
type Backend struct {
	guests  string // <data dir>/guests
	log     hclog.Logger
	agentLg *slog.Logger
	events  *eventer.Eventer
	version string

	mu     sync.Mutex
	byDir  map[string]*guest
	byUUID map[string]*guest // the same guests, for the events' ring bytes

	pushing atomic.Int64 // Events streams open: rings are pushed, not read (push.go)
}

var _ sdk.Backend = (*Backend)(nil)

// Options configures New.
type Options struct {
	// DataDir is where guest directories are created (guests/<id>).
	DataDir string
	// Logger receives the backend's log; nil discards it.
	Logger hclog.Logger
	// AgentLog receives the agents' log; nil discards it.
	AgentLog *slog.Logger
	// AgentVersion is what the agents report as their version.
	AgentVersion string
}

// New returns a backend keeping its guests under opts.DataDir.
func New(opts Options) (*Backend, error) {
	if opts.DataDir == "" {
		return nil, errors.New("fleet backend: data dir is required")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("fleet backend data dir %q: %w", opts.DataDir, err)
	}
	guests := filepath.Join(dir, "guests")
	if err := os.MkdirAll(guests, 0o700); err != nil {
		return nil, fmt.Errorf("fleet backend data dir: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	alog := opts.AgentLog
	if alog == nil {
		alog = slog.New(slog.DiscardHandler)
	}
	v := opts.AgentVersion
	if v == "" {
		v = "fleet-" + Version
	}
	return &Backend{guests: guests, log: log, agentLg: alog, events: eventer.New(log), version: v, byDir: map[string]*guest{}, byUUID: map[string]*guest{}}, nil
}

// Info describes the backend.
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	return &sdk.Info{
		Name:           Name,
		Version:        Version,
		Capabilities:   []sdk.Capability{sdk.CapRingBuffer, sdk.CapRingPush, sdk.CapLinkHybrid, sdk.CapRecover},
		ConfigPrefixes: []string{ConfigPrefix},
		ConfigSchema:   Schema,
	}, nil
}

// Running returns how many guests run.
func (b *Backend) Running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, g := range b.byDir {
		g.mu.Lock()
		if g.run != nil {
			n++
		}
		g.mu.Unlock()
	}
	return n
}

// Create prepares a guest directory and returns its handle.
func (b *Backend) Create(_ context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
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
	if l := len(linkSocket(h.Dir) + "_65535"); l > sdk.MaxSocketPath {
		return nil, fmt.Errorf("creating guest %q: socket paths under %s would be %d bytes, over the limit of %d; use a shorter %s: %w",
			spec.Name, h.Dir, l, sdk.MaxSocketPath, sdk.DataDirEnv, sdk.ErrInvalid)
	}
	if err := os.Mkdir(h.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if err := writeMarker(h); err != nil {
		os.RemoveAll(h.Dir)
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	return h.encode(), nil
}

func validateSpec(spec *sdk.GuestSpec) error {
	if _, err := ParseConfig(spec.Config); err != nil {
		return err
	}
	for _, f := range spec.Files {
		if err := validateFilePath(f.Path); err != nil {
			return err
		}
	}
	return nil
}

// validateFilePath refuses config drive paths that are absolute or leave
// the drive.
func validateFilePath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || filepath.Clean(filepath.FromSlash(p)) != filepath.FromSlash(p) || strings.HasPrefix(p, "..") {
		return fmt.Errorf("config drive path %q must be relative and clean: %w", p, sdk.ErrInvalid)
	}
	return nil
}

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

// lookup decodes and checks a handle and returns its guest, creating the
// in-memory entry of a guest this process has not seen yet.
func (b *Backend) lookup(raw sdk.Handle) (*guest, error) {
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
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.byDir[h.Dir]
	if !ok {
		ring, _ := ringbuffer.New(RingSize) // a constant power of two
		g = &guest{h: h, ring: ring, turn: make(chan struct{}, 1)}
		b.byDir[h.Dir] = g
		b.byUUID[h.UUID] = g
	}
	return g, nil
}

// Start boots the guest: its ports, config drive and agent.
func (b *Backend) Start(ctx context.Context, raw sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	if spec == nil {
		return nil, nil, fmt.Errorf("starting guest: no spec: %w", sdk.ErrInvalid)
	}
	if spec.RestoreState {
		return nil, nil, fmt.Errorf("starting guest %q from saved state: the fleet backend has no stateful stop: %w", spec.Name, sdk.ErrNotSupported)
	}
	beh, err := ParseConfig(spec.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", spec.Name, err)
	}
	for _, f := range spec.Files {
		if err := validateFilePath(f.Path); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: %w", spec.Name, err)
		}
	}
	g, err := b.lookup(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	unlock, err := g.lock(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if err := g.start(b, spec, beh); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", g.h.Name, err)
	}
	return g.h.encode(), g.state(), nil
}

// Stop shuts the guest down: its agent stops (writing STOPPED) unless
// Force, which kills it without a word.
func (b *Backend) Stop(ctx context.Context, raw sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	if opts.Stateful {
		return nil, fmt.Errorf("stopping guest with state: the fleet backend has no stateful stop: %w", sdk.ErrNotSupported)
	}
	g, err := b.lookup(raw)
	if err != nil {
		if errors.Is(err, sdk.ErrNotFound) {
			return &sdk.GuestState{Status: sdk.StatusStopped}, nil
		}
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	unlock, err := g.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if err := g.stop(ctx, opts.Force, timeout); err != nil {
		return nil, fmt.Errorf("stopping guest %q: %w", g.h.Name, err)
	}
	return g.state(), nil
}

// Delete removes a stopped guest's directory.
func (b *Backend) Delete(ctx context.Context, raw sdk.Handle) error {
	g, err := b.lookup(raw)
	if errors.Is(err, sdk.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	unlock, err := g.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if g.running() {
		return fmt.Errorf("deleting guest %q: it is running: %w", g.h.Name, sdk.ErrConflict)
	}
	if err := os.RemoveAll(g.h.Dir); err != nil {
		return fmt.Errorf("deleting guest %q: %w", g.h.Name, err)
	}
	b.mu.Lock()
	delete(b.byDir, g.h.Dir)
	if b.byUUID[g.h.UUID] == g {
		delete(b.byUUID, g.h.UUID)
	}
	b.mu.Unlock()
	return nil
}

// State reports the guest's state from memory.
func (b *Backend) State(_ context.Context, raw sdk.Handle) (*sdk.GuestState, error) {
	g, err := b.lookup(raw)
	if err != nil {
		return nil, fmt.Errorf("guest state: %w", err)
	}
	return g.state(), nil
}

// Events streams the guests' events; ring-data events carry the guest's
// ring bytes (sdk.CapRingPush, push.go).
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	return b.pushEvents(ctx)
}

// ReadRing consumes up to max bytes of the guest's ring.
func (b *Backend) ReadRing(_ context.Context, raw sdk.Handle, max int) ([]byte, error) {
	g, err := b.lookup(raw)
	if err != nil {
		return nil, fmt.Errorf("reading ring: %w", err)
	}
	if max < 0 {
		return nil, fmt.Errorf("reading ring of %q: negative size %d: %w", g.h.Name, max, sdk.ErrInvalid)
	}
	if b.pushing.Load() > 0 {
		return nil, nil // the bytes go with the events (sdk.CapRingPush)
	}
	return g.ring.Read(max), nil
}

// LinkEndpoint returns the guest's hybrid link socket.
func (b *Backend) LinkEndpoint(_ context.Context, raw sdk.Handle) (*sdk.LinkEndpoint, error) {
	g, err := b.lookup(raw)
	if err != nil {
		return nil, fmt.Errorf("finding link endpoint: %w", err)
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: linkSocket(g.h.Dir)}, nil
}

// Recover reports the guest's state: its guests live in this process, so a
// guest this process runs is running and any other is stopped.
func (b *Backend) Recover(_ context.Context, raw sdk.Handle, _ *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	g, err := b.lookup(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	return g.h.encode(), g.state(), nil
}

// Close stops every guest at once (the host is going away).
func (b *Backend) Close() {
	b.mu.Lock()
	gs := make([]*guest, 0, len(b.byDir))
	for _, g := range b.byDir {
		gs = append(gs, g)
	}
	b.mu.Unlock()
	for _, g := range gs {
		_ = g.stop(context.Background(), true, 10*time.Second)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
