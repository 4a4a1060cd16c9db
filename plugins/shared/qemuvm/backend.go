// Package qemuvm is the QEMU machinery shared by the qemu and qemu-legacy
// backend plugins: it implements sdk.Backend with one QEMU process per
// guest, started in a session of its own so it outlives the plugin and the
// daemon, and driven over QMP (plugins/shared/qmp).
//
// Each guest has a directory (Options.Dir/<uuid>) holding its QMP socket,
// its serial-link socket, QEMU's log, the serial console log, the boot
// initramfs with the config drive appended, and a saved state. The two
// plugins differ only in the virtio-serial Layout.
//
// Files by concern: backend.go (Options, New, Create, Delete, State,
// Recover), start.go (process launch: command line, boot initramfs, QMP
// connection, restore), qmppump.go (QMP events to backend events), stop.go
// (graceful, forced and timed-out stops), savestate.go (stateful stop and
// its metadata), ring.go (ringbuf-read), cid.go (vsock guest CID
// reservation), process.go (pid checks, logs), preflight.go (what the
// host must have: programs, firmware), handle.go, config.go, cmdline.go,
// layout.go, accel.go.
package qemuvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/eventer"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// Options configures a Backend.
type Options struct {
	Name     string // plugin name reported by Info, e.g. "qemu"
	Version  string
	Layout   Layout
	Dir      string // where guest directories live; created if missing
	Binary   string // QEMU binary; default qemu-system-x86_64 from PATH
	Defaults Defaults
	Logger   hclog.Logger
	// Host overrides the probed host capabilities (tests).
	Host *HostCaps
}

// Environment variables the plugin mains read (see OptionsFromEnv).
const (
	EnvDir    = "GUESTLINK_QEMU_DIR"    // guest directories
	EnvBinary = "GUESTLINK_QEMU_BINARY" // QEMU binary
	EnvKernel = "GUESTLINK_QEMU_KERNEL" // default qemu.kernel
	EnvInitrd = "GUESTLINK_QEMU_INITRD" // default qemu.initrd
)

// SystemPath is the PATH QEMU runs with.
const SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// VMMEnv is QEMU's whole environment: PATH alone. QEMU outlives the plugin
// and needs none of the plugin's or the daemon's variables (go-plugin's
// handshake, a CLI's GUESTLINK_CONFIG_DIR, credentials); the guest, a
// machine of its own, never sees a host environment.
func VMMEnv() []string {
	return []string{"PATH=" + SystemPath}
}

// EnvDataDir is the plugin data directory the daemon hands every plugin.
const EnvDataDir = sdk.DataDirEnv

// OptionsFromEnv fills Dir, Binary and Defaults from the environment; Dir
// defaults to <$GUESTLINK_PLUGIN_DATA_DIR>/<name> when the daemon set it,
// else to the user cache directory's guestlink/<name>.
func OptionsFromEnv(name string, layout Layout) Options {
	o := Options{Name: name, Layout: layout, Dir: os.Getenv(EnvDir), Binary: os.Getenv(EnvBinary),
		Defaults: Defaults{Kernel: os.Getenv(EnvKernel), Initrd: os.Getenv(EnvInitrd)}}
	if o.Dir == "" {
		if data := os.Getenv(EnvDataDir); data != "" {
			o.Dir = filepath.Join(data, name)
			return o
		}
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		o.Dir = filepath.Join(base, "guestlink", name)
	}
	return o
}

// Backend runs guests as QEMU processes. It is safe for concurrent use.
type Backend struct {
	opts Options
	caps HostCaps
	log  hclog.Logger

	mu  sync.Mutex
	vms map[string]*vm // by uuid

	events *eventer.Eventer // open Events streams

	fwMu sync.Mutex
	fw   *firmwareDirs // QEMU's firmware search path, once asked (preflight.go)
}

var _ sdk.Backend = (*Backend)(nil)

// vm is the plugin's in-memory view of one guest.
type vm struct {
	op sync.Mutex // serialises Start, Stop, Delete and Recover

	mu     sync.Mutex
	client *qmp.Client
	exited chan struct{} // closed when our child was reaped; nil when not our child
	reason string        // the boot's first SHUTDOWN reason
	// drained holds ring bytes the backend read on its own (at the
	// guest's power-off, before QEMU quit), oldest first, until ReadRing
	// hands them out; a new boot clears them.
	drained []byte
	// deleted are the watchers of DEVICE_DELETED by device id (hotplug.go).
	deleted map[string]chan struct{}
}

// New returns a Backend; it probes the host unless opts.Host is set.
func New(opts Options) (*Backend, error) {
	if !opts.Layout.Valid() {
		return nil, fmt.Errorf("qemu backend: unknown layout %q", opts.Layout)
	}
	if opts.Dir == "" {
		return nil, errors.New("qemu backend: no guest directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("qemu backend: %w", err)
	}
	opts.Dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("qemu backend: creating guest directory: %w", err)
	}
	if opts.Binary == "" {
		opts.Binary = "qemu-system-x86_64"
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	b := &Backend{opts: opts, log: opts.Logger, vms: map[string]*vm{}, events: eventer.New(opts.Logger)}
	if opts.Host != nil {
		b.caps = *opts.Host
	} else {
		b.caps = ProbeHost()
	}
	return b, nil
}

// Info describes the backend and what the host lacks for it (preflight.go).
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	// vsock is always possible: through /dev/vhost-vsock or the user-space device.
	caps := []sdk.Capability{sdk.CapStateful, sdk.CapLinkSerial, sdk.CapRingBuffer, sdk.CapRecover,
		sdk.CapSnapshot, sdk.CapSnapshotStateful, sdk.CapMove, sdk.CapHotplug, sdk.CapDisk, sdk.CapNICUser, sdk.CapLinkVsock}
	return &sdk.Info{Name: b.opts.Name, Version: b.opts.Version, Capabilities: caps, ConfigPrefixes: []string{ConfigPrefix}, ConfigSchema: Schema,
		InstanceType: sdk.InstanceTypeVM, Missing: b.missing()}, nil
}

func (b *Backend) vm(uuid string) *vm {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.vms[uuid]
	if v == nil {
		v = &vm{}
		b.vms[uuid] = v
	}
	return v
}

// markerFile marks a directory as a guest directory of this package and
// holds the guest's UUID, so Delete never removes anything else.
const markerFile = ".guestlink-qemu"

// Create validates the spec and prepares the guest's directory.
func (b *Backend) Create(ctx context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if err := checkUUID(spec.UUID); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w: %v", spec.Name, sdk.ErrInvalid, err)
	}
	if spec.Image != nil {
		if err := checkImage(spec.Image); err != nil {
			return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
		}
	}
	size, err := rootSize(spec.Devices)
	if err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if _, err := parseNICs(spec.Config, spec.UUID, spec.Devices); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if _, err := ParseConfig(spec.Config, b.defaultsFor(spec)); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	dir := filepath.Join(b.opts.Dir, spec.UUID)
	if n := len(filepath.Join(dir, qmpSocket)); n > sdk.MaxSocketPath {
		return nil, fmt.Errorf("creating guest %q: %w: socket path %q is %d bytes, the limit is %d (set %s shorter)", spec.Name, sdk.ErrInvalid, filepath.Join(dir, qmpSocket), n, sdk.MaxSocketPath, EnvDir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(spec.UUID+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
	}
	if spec.Image != nil {
		if err := createOverlay(ctx, dir, spec.Image, size); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("creating guest %q: %w", spec.Name, err)
		}
	}
	h := &handle{Version: handleVersion, UUID: spec.UUID, Name: spec.Name, Dir: dir, Layout: b.opts.Layout}
	return h.encode(), nil
}

// running reports whether the handle's QEMU is alive.
func (h *handle) running() bool { return processMatches(h.PID, h.StartTime, h.UUID) }

// Delete removes a stopped guest's directory.
func (b *Backend) Delete(_ context.Context, hb sdk.Handle) error {
	h, err := b.decode(hb)
	if err != nil {
		return fmt.Errorf("deleting guest: %w", err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if h.running() {
		return fmt.Errorf("deleting guest %q: %w: it is running (pid %d)", h.Name, sdk.ErrConflict, h.PID)
	}
	marker, err := os.ReadFile(filepath.Join(h.Dir, markerFile))
	switch {
	case err == nil && strings.TrimSpace(string(marker)) != h.UUID:
		return fmt.Errorf("deleting guest %q: %w: directory %s is marked for another guest", h.Name, sdk.ErrInvalid, h.Dir)
	case err == nil:
		if err := os.RemoveAll(h.Dir); err != nil {
			return fmt.Errorf("deleting guest %q: %w", h.Name, err)
		}
	}
	b.mu.Lock()
	delete(b.vms, h.UUID)
	b.mu.Unlock()
	return nil
}

// State reports the guest's state.
func (b *Backend) State(_ context.Context, hb sdk.Handle) (*sdk.GuestState, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("guest state: %w", err)
	}
	return b.stateOf(h), nil
}

func (b *Backend) stateOf(h *handle) *sdk.GuestState {
	// The console log outlives the guest: what it printed before it
	// stopped (a panic) is what one reads after.
	st := &sdk.GuestState{Status: sdk.StatusStopped, Details: map[string]string{"layout": string(h.Layout), "ring_port": h.Layout.RingPort(),
		"console_log": filepath.Join(h.Dir, consoleLog)}}
	if _, err := readStateMeta(h.Dir); err == nil {
		st.HasSavedState = true
	}
	if h.running() {
		st.Status = sdk.StatusRunning
		st.PID = int64(h.PID)
		st.Details["accel"] = h.Accel
		st.Details["link"] = string(h.Link)
		if h.Vsock != "" {
			st.Details["vsock"] = h.Vsock
		}
		st.Details["qmp_socket"] = filepath.Join(h.Dir, qmpSocket)
	}
	return st
}

// Events streams backend events until ctx ends, under the eventer
// package's drop policy.
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	return b.events.Stream(ctx)
}

// LinkEndpoint tells how the daemon reaches the running guest's agent.
func (b *Backend) LinkEndpoint(_ context.Context, hb sdk.Handle) (*sdk.LinkEndpoint, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("link endpoint: %w", err)
	}
	if !h.running() {
		return nil, fmt.Errorf("link endpoint of %q: %w: not running", h.Name, sdk.ErrConflict)
	}
	if h.Link == sdk.LinkVsock && h.Vsock == VsockUser {
		// The guest uses AF_VSOCK; the device's host side is the hybrid
		// convention on this socket (docs/vsock.md).
		return &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: h.CID, Path: filepath.Join(h.Dir, vsockSocket)}, nil
	}
	if h.Link == sdk.LinkVsock {
		return &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: h.CID}, nil
	}
	return &sdk.LinkEndpoint{Kind: sdk.LinkSerial, Path: filepath.Join(h.Dir, linkSocket)}, nil
}

// Recover re-attaches to a running guest's QEMU (a new QMP connection) and
// reports its state; it is idempotent.
func (b *Backend) Recover(ctx context.Context, hb sdk.Handle, _ *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, nil, fmt.Errorf("recovering guest: %w", err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if !h.running() {
		h.PID, h.StartTime = 0, 0
		return h.encode(), b.stateOf(h), nil
	}
	if _, err := b.ensureQMP(ctx, h, v); err != nil {
		return nil, nil, fmt.Errorf("recovering guest %q: %w", h.Name, err)
	}
	return h.encode(), b.stateOf(h), nil
}
