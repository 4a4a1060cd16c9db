// Package qemuvm is the QEMU machinery shared by the qemu and qemu-legacy
// backend plugins: it implements sdk.Backend with one QEMU process per
// guest, started in a session of its own so it outlives the plugin and the
// daemon, and driven over QMP (plugins/shared/qmp).
//
// Each guest has a directory (Options.Dir/<uuid>) holding its QMP socket,
// its serial-link socket, QEMU's log, the serial console log, the boot
// initramfs with the config drive appended, and a saved state. The two
// plugins differ only in the virtio-serial Layout.
package qemuvm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/eventer"
	"github.com/guestlink/guestlink/plugins/shared/guestimage"
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
}

var _ sdk.Backend = (*Backend)(nil)

// vm is the plugin's in-memory view of one guest.
type vm struct {
	op sync.Mutex // serialises Start, Stop, Delete and Recover

	mu     sync.Mutex
	client *qmp.Client
	exited chan struct{} // closed when our child was reaped; nil when not our child
	reason string        // last SHUTDOWN reason
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

// Info describes the backend.
func (b *Backend) Info(context.Context) (*sdk.Info, error) {
	caps := []sdk.Capability{sdk.CapStateful, sdk.CapLinkSerial, sdk.CapRingBuffer, sdk.CapRecover}
	if b.caps.VhostVsock {
		caps = append(caps, sdk.CapLinkVsock)
	}
	return &sdk.Info{Name: b.opts.Name, Version: b.opts.Version, Capabilities: caps, ConfigPrefixes: []string{ConfigPrefix}}, nil
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
func (b *Backend) Create(_ context.Context, spec *sdk.GuestSpec) (sdk.Handle, error) {
	if err := checkUUID(spec.UUID); err != nil {
		return nil, fmt.Errorf("creating guest %q: %w: %v", spec.Name, sdk.ErrInvalid, err)
	}
	if _, err := ParseConfig(spec.Config, b.opts.Defaults); err != nil {
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
	h := &handle{Version: handleVersion, UUID: spec.UUID, Name: spec.Name, Dir: dir, Layout: b.opts.Layout}
	return h.encode(), nil
}

// running reports whether the handle's QEMU is alive.
func (h *handle) running() bool { return processMatches(h.PID, h.StartTime, h.UUID) }

// stateMetaDoc describes a saved state.
type stateMetaDoc struct {
	Layout    Layout       `json:"layout"`
	Link      sdk.LinkKind `json:"link"`
	MemoryMiB int          `json:"memory_mib"`
	CPUs      int          `json:"cpus"`
	Accel     string       `json:"accel"`
	Saved     time.Time    `json:"saved"`
}

func readStateMeta(dir string) (*stateMetaDoc, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateMeta))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		return nil, err
	}
	var m stateMetaDoc
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading saved state description: %w", err)
	}
	return &m, nil
}

// ErrLayoutMismatch is wrapped (with sdk.ErrConflict) by the error of a
// stateful restore whose saved state has another virtio-serial layout.
var ErrLayoutMismatch = errors.New("saved state has another serial port layout")

// Start boots the guest (or restores its saved state) and returns once QEMU
// runs it.
func (b *Backend) Start(ctx context.Context, hb sdk.Handle, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest: %w", err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	name := h.Name
	if h.running() {
		return nil, nil, fmt.Errorf("starting guest %q: %w: already running (pid %d)", name, sdk.ErrConflict, h.PID)
	}
	if _, err := os.Stat(filepath.Join(h.Dir, markerFile)); err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w: guest directory %s is gone (create the guest again)", name, sdk.ErrNotFound, h.Dir)
	}
	cfg, err := ParseConfig(spec.Config, b.opts.Defaults)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	l := &launch{Name: name, UUID: h.UUID, Dir: h.Dir, Config: cfg, Layout: b.opts.Layout,
		Accel: resolveAccel(cfg.Accel, b.caps), Link: cfg.Link}
	if l.Link == "" {
		l.Link = sdk.LinkSerial
		if b.caps.VhostVsock {
			l.Link = sdk.LinkVsock
		}
	}
	if l.Link == sdk.LinkVsock && !b.caps.VhostVsock {
		return nil, nil, fmt.Errorf("starting guest %q: %w: %s=vsock but /dev/vhost-vsock does not exist on this host (use serial)", name, sdk.ErrInvalid, KeyLink)
	}
	if spec.RestoreState {
		meta, err := readStateMeta(h.Dir)
		if err != nil {
			return nil, nil, fmt.Errorf("starting guest %q from its saved state: %w: no saved state: %v", name, sdk.ErrConflict, err)
		}
		if meta.Layout != b.opts.Layout {
			return nil, nil, fmt.Errorf("starting guest %q from its saved state: %w: %w: the state was saved with the %s, this plugin uses the %s; QEMU cannot load it (Failed to load virtio-console). A stateless restore works: start without restoring the state",
				name, sdk.ErrConflict, ErrLayoutMismatch, meta.Layout.Describe(), b.opts.Layout.Describe())
		}
		if meta.Link != l.Link {
			return nil, nil, fmt.Errorf("starting guest %q from its saved state: %w: the state was saved with the %s link, this start would use %s; a stateless restore works", name, sdk.ErrConflict, meta.Link, l.Link)
		}
		// The device set and memory size must match the saved machine.
		l.Config.MemoryMiB, l.Config.CPUs = meta.MemoryMiB, meta.CPUs
		l.Restore = true
	}

	var files []guestimage.ConfigFile
	for _, f := range spec.Files {
		files = append(files, guestimage.ConfigFile{Path: f.Path, Mode: f.Mode, Data: f.Data})
	}
	initrd, err := writeBootInitrd(h.Dir, cfg.Initrd, files)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	l.Initrd = initrd

	var extra []*os.File
	if l.Link == sdk.LinkVsock {
		r, err := ReserveCID(VhostVsockDevice, h.CID)
		if err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
		}
		defer r.Close() // QEMU keeps its own copy
		extra = append(extra, r.File)
		l.CID = r.CID
	}
	for _, f := range []string{qmpSocket, linkSocket} {
		os.Remove(filepath.Join(h.Dir, f))
	}
	logf, err := os.OpenFile(filepath.Join(h.Dir, qemuLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	cmd := exec.Command(b.opts.Binary, l.args()...)
	cmd.Dir = h.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: running %s: %w", name, b.opts.Binary, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	fail := func(what string, err error) (sdk.Handle, *sdk.GuestState, error) {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		msg := tail(filepath.Join(h.Dir, qemuLog), 2048)
		if msg == "" {
			msg = "(QEMU wrote nothing)"
		}
		return nil, nil, fmt.Errorf("starting guest %q: %s: %w; QEMU said: %s", name, what, err, msg)
	}
	client, err := connectQMP(ctx, filepath.Join(h.Dir, qmpSocket), exited)
	if err != nil {
		return fail("connecting to QMP", err)
	}
	h.PID = cmd.Process.Pid
	h.StartTime, _ = procStartTime(h.PID)
	h.Accel, h.Link, h.CID = l.Accel, l.Link, l.CID
	v.mu.Lock()
	v.client, v.exited, v.reason = client, exited, ""
	v.mu.Unlock()
	go b.pump(h, v, client)

	if l.Restore {
		uri := "exec:cat '" + filepath.Join(h.Dir, stateFile) + "'"
		if err := client.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil); err != nil {
			return fail("loading the saved state", err)
		}
		if err := waitIncoming(ctx, client, exited); err != nil {
			return fail("loading the saved state", err)
		}
	}
	if err := client.Execute(ctx, "cont", nil, nil); err != nil {
		return fail("resuming the guest", err)
	}
	// A saved state is used once: restored now, or discarded by a
	// stateless start, which must not be restored by a later one.
	os.Remove(filepath.Join(h.Dir, stateFile))
	os.Remove(filepath.Join(h.Dir, stateMeta))
	b.log.Info("guest started", "name", name, "pid", h.PID, "accel", h.Accel, "link", h.Link, "layout", h.Layout, "restored", l.Restore)
	return h.encode(), b.stateOf(h), nil
}

// connectQMP dials the QMP socket until QEMU created it, QEMU exited or ctx ended.
func connectQMP(ctx context.Context, path string, exited <-chan struct{}) (*qmp.Client, error) {
	for {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := qmp.Dial(dctx, path)
		cancel()
		if err == nil {
			return c, nil
		}
		select {
		case <-exited:
			return nil, errors.New("QEMU exited")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitIncoming waits until an incoming migration finished.
func waitIncoming(ctx context.Context, c *qmp.Client, exited <-chan struct{}) error {
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
			return err
		}
		if st.Status != "inmigrate" {
			return nil
		}
		select {
		case <-exited:
			return errors.New("QEMU exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeBootInitrd writes the initramfs QEMU boots: the base initrd (if any),
// padded to 4 bytes, followed by the config drive archive.
func writeBootInitrd(dir, base string, files []guestimage.ConfigFile) (string, error) {
	var buf bytes.Buffer
	if base != "" {
		b, err := os.ReadFile(base)
		if err != nil {
			return "", fmt.Errorf("reading initrd: %w", err)
		}
		buf.Write(b)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
	}
	if err := guestimage.WriteConfigArchive(&buf, files); err != nil {
		return "", fmt.Errorf("%w: %w", sdk.ErrInvalid, err)
	}
	p := filepath.Join(dir, bootInitrd)
	if err := os.WriteFile(p+".tmp", buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("writing config drive: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return "", fmt.Errorf("writing config drive: %w", err)
	}
	return p, nil
}

// pump turns one QMP connection's events into backend events, and emits
// EventExited when the connection closed because QEMU ended.
func (b *Backend) pump(h *handle, v *vm, c *qmp.Client) {
	names := map[string]string{}
	for _, p := range h.Layout.ports(h.Link == sdk.LinkSerial) {
		names[p.id] = p.name
	}
	for ev := range c.Events() {
		switch ev.Name {
		case "VSERPORT_CHANGE":
			var d struct {
				ID   string `json:"id"`
				Open bool   `json:"open"`
			}
			json.Unmarshal(ev.Data, &d)
			kind := sdk.EventPortClosed
			if d.Open {
				kind = sdk.EventPortOpened
			}
			port := names[d.ID]
			if port == "" {
				port = d.ID
			}
			b.events.Emit(sdk.Event{UUID: h.UUID, Kind: kind, Port: port, Time: ev.Time})
		case "RESET":
			b.events.Emit(sdk.Event{UUID: h.UUID, Kind: sdk.EventReset, Time: ev.Time})
		case "SHUTDOWN":
			var d struct {
				Reason string `json:"reason"`
			}
			json.Unmarshal(ev.Data, &d)
			v.mu.Lock()
			v.reason = d.Reason
			v.mu.Unlock()
		}
	}
	// The connection closed: QEMU exited, or (rarely) the socket broke.
	if !waitGone(h, v, 10*time.Second) {
		v.mu.Lock()
		if v.client == c {
			v.client = nil
		}
		v.mu.Unlock()
		return
	}
	v.mu.Lock()
	reason := v.reason
	if v.client == c {
		v.client = nil
	}
	v.mu.Unlock()
	if reason == "" {
		reason = "qemu exited"
	}
	b.log.Info("guest exited", "name", h.Name, "pid", h.PID, "reason", reason)
	b.events.Emit(sdk.Event{UUID: h.UUID, Kind: sdk.EventExited, Detail: reason, Time: time.Now()})
}

// waitGone waits up to d for the guest's QEMU to end; it reports whether it did.
func waitGone(h *handle, v *vm, d time.Duration) bool {
	v.mu.Lock()
	exited := v.exited
	v.mu.Unlock()
	deadline := time.After(d)
	for {
		if !h.running() {
			if exited != nil {
				select { // let our reaper finish so the PID is free
				case <-exited:
				case <-time.After(time.Second):
				}
			}
			return true
		}
		select {
		case <-exited:
			return true
		case <-deadline:
			return false
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// ensureQMP returns the guest's QMP connection, connecting if needed.
func (b *Backend) ensureQMP(ctx context.Context, h *handle, v *vm) (*qmp.Client, error) {
	v.mu.Lock()
	c := v.client
	v.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := qmp.Dial(dctx, filepath.Join(h.Dir, qmpSocket))
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.client != nil && v.client.Err() == nil {
		old := v.client
		v.mu.Unlock()
		c.Close()
		return old, nil
	}
	v.client = c
	v.mu.Unlock()
	go b.pump(h, v, c)
	return c, nil
}

// DefaultStopTimeout is the graceful budget of a Stop without one.
const DefaultStopTimeout = 30 * time.Second

// Stop shuts the guest down: saving its state (Stateful), at once (Force),
// or through the ACPI power button with QMP quit after the budget.
func (b *Backend) Stop(ctx context.Context, hb sdk.Handle, opts sdk.StopOptions) (*sdk.GuestState, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("stopping guest: %w", err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if !h.running() {
		return b.stateOf(h), nil
	}
	c, err := b.ensureQMP(ctx, h, v)
	if err != nil {
		if opts.Stateful {
			return nil, fmt.Errorf("stopping guest %q with its state: %w", h.Name, err)
		}
		b.log.Warn("no QMP connection, killing QEMU", "name", h.Name, "pid", h.PID, "error", err)
		syscall.Kill(h.PID, syscall.SIGKILL)
		waitGone(h, v, 30*time.Second)
		return b.stateOf(h), nil
	}
	switch {
	case opts.Stateful:
		if err := b.saveState(ctx, h, c); err != nil {
			c.Execute(ctx, "cont", nil, nil)
			return nil, fmt.Errorf("stopping guest %q with its state: %w", h.Name, err)
		}
	case !opts.Force:
		budget := opts.Timeout
		if budget <= 0 {
			budget = DefaultStopTimeout
		}
		// Leave time within ctx to quit QEMU when the guest ignores the button.
		if dl, ok := ctx.Deadline(); ok {
			budget = max(min(budget, time.Until(dl)-10*time.Second), 0)
		}
		deadline := time.Now().Add(budget)
		for time.Now().Before(deadline) {
			// Repeat the button press: one sent while the guest was still
			// booting (before acpid ran) is lost.
			if err := c.Execute(ctx, "system_powerdown", nil, nil); err != nil && !errors.Is(err, qmp.ErrClosed) {
				return nil, fmt.Errorf("stopping guest %q: %w", h.Name, err)
			}
			if waitGone(h, v, min(5*time.Second, time.Until(deadline))) {
				return b.stateOf(h), nil
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("stopping guest %q: %w", h.Name, ctx.Err())
			}
		}
		b.log.Info("graceful stop timed out, quitting QEMU", "name", h.Name, "budget", budget)
	}
	if err := c.Execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, qmp.ErrClosed) {
		b.log.Warn("QMP quit failed, killing QEMU", "name", h.Name, "error", err)
		syscall.Kill(h.PID, syscall.SIGKILL)
	}
	if !waitGone(h, v, 15*time.Second) {
		syscall.Kill(h.PID, syscall.SIGKILL)
		if !waitGone(h, v, 15*time.Second) {
			return nil, fmt.Errorf("stopping guest %q: QEMU %d does not exit", h.Name, h.PID)
		}
	}
	return b.stateOf(h), nil
}

// saveState pauses the guest and migrates its state to the guest's state file.
func (b *Backend) saveState(ctx context.Context, h *handle, c *qmp.Client) error {
	if err := c.Execute(ctx, "stop", nil, nil); err != nil {
		return err
	}
	tmp := filepath.Join(h.Dir, stateFile+".tmp")
	os.Remove(tmp)
	if err := c.Execute(ctx, "migrate", map[string]any{"uri": "exec:cat > '" + tmp + "'"}, nil); err != nil {
		return err
	}
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := c.Execute(ctx, "query-migrate", nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			var cfg struct {
				MemoryMiB int
				CPUs      int
			}
			var mem struct {
				BaseMemory int64 `json:"base-memory"`
			}
			if err := c.Execute(ctx, "query-memory-size-summary", nil, &mem); err == nil {
				cfg.MemoryMiB = int(mem.BaseMemory >> 20)
			}
			var cpus []json.RawMessage
			if err := c.Execute(ctx, "query-cpus-fast", nil, &cpus); err == nil {
				cfg.CPUs = len(cpus)
			}
			meta := stateMetaDoc{Layout: h.Layout, Link: h.Link, MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Accel: h.Accel, Saved: time.Now().UTC()}
			mb, _ := json.Marshal(meta)
			if err := os.Rename(tmp, filepath.Join(h.Dir, stateFile)); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(h.Dir, stateMeta), mb, 0o600)
		case "failed", "cancelled":
			return fmt.Errorf("saving state: migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			c.Execute(context.Background(), "migrate_cancel", nil, nil)
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

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
	st := &sdk.GuestState{Status: sdk.StatusStopped, Details: map[string]string{"layout": string(h.Layout), "ring_port": h.Layout.RingPort()}}
	if _, err := readStateMeta(h.Dir); err == nil {
		st.HasSavedState = true
	}
	if h.running() {
		st.Status = sdk.StatusRunning
		st.PID = int64(h.PID)
		st.Details["accel"] = h.Accel
		st.Details["link"] = string(h.Link)
		st.Details["qmp_socket"] = filepath.Join(h.Dir, qmpSocket)
		st.Details["console_log"] = filepath.Join(h.Dir, consoleLog)
	}
	return st
}

// Events streams backend events until ctx ends, under the eventer
// package's drop policy.
func (b *Backend) Events(ctx context.Context) (<-chan sdk.Event, error) {
	return b.events.Stream(ctx)
}

// ReadRing reads and consumes up to max bytes of the guest's ring buffer.
func (b *Backend) ReadRing(ctx context.Context, hb sdk.Handle, max int) ([]byte, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	if max <= 0 {
		return nil, fmt.Errorf("reading ring buffer of %q: %w: size %d", h.Name, sdk.ErrInvalid, max)
	}
	if !h.running() {
		return nil, fmt.Errorf("reading ring buffer of %q: %w: not running", h.Name, sdk.ErrConflict)
	}
	c, err := b.ensureQMP(ctx, h, b.vm(h.UUID))
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	var s string
	if err := c.Execute(ctx, "ringbuf-read", map[string]any{"device": RingChardev, "size": max, "format": "base64"}, &s); err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	return data, nil
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
