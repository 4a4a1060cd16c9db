package qemuvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/guestimage"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

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
	cfg, err := ParseConfig(spec.Config, b.defaultsFor(spec))
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	if spec.Image != nil {
		if err := checkImage(spec.Image); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
		}
		if _, err := os.Stat(filepath.Join(h.Dir, rootDisk)); errors.Is(err, os.ErrNotExist) {
			size, err := rootSize(spec.Devices)
			if err == nil {
				err = createOverlay(ctx, h.Dir, spec.Image, size)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
			}
		}
	}
	nics, err := parseNICs(spec.Config, h.UUID, spec.Devices)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	l := &launch{Name: name, UUID: h.UUID, Dir: h.Dir, Config: cfg, Layout: b.opts.Layout,
		Accel: resolveAccel(cfg.Accel, b.caps), Link: cfg.Link, Disks: coldDisks(spec.Devices), NICs: nics}
	l.Link, l.Vsock, err = resolveLink(cfg, b.caps.VhostVsock)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
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
		if meta.Vsock == "" && meta.Link == sdk.LinkVsock {
			meta.Vsock = VsockKernel
		}
		if meta.Link != l.Link || meta.Vsock != l.Vsock {
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
	if spec.Image != nil {
		if err := writeConfigDrive(ctx, h.Dir, spec.Files); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
		}
	}
	initrd, err := writeBootInitrd(h.Dir, cfg.Initrd, files)
	if err != nil {
		return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
	}
	l.Initrd = initrd

	var extra []*os.File
	var vsockd *exec.Cmd
	if l.Vsock == VsockUser {
		if l.CID = h.CID; l.CID == 0 {
			l.CID = randomCID() // private to this guest's device: nothing to reserve
		}
		if vsockd, err = startVsockd(h.Dir, l.CID, l.Restore); err != nil {
			return nil, nil, fmt.Errorf("starting guest %q: %w", name, err)
		}
	}
	if l.Vsock == VsockKernel {
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
	cmd.Env = VMMEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		if vsockd != nil {
			vsockd.Process.Kill()
			vsockd.Wait()
		}
		return nil, nil, fmt.Errorf("starting guest %q: running %s: %w", name, b.opts.Binary, err)
	}
	if vsockd != nil {
		// Detached like QEMU: it ends when QEMU closes its socket.
		go vsockd.Wait()
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	fail := func(what string, err error) (sdk.Handle, *sdk.GuestState, error) {
		cmd.Process.Kill()
		if vsockd != nil {
			vsockd.Process.Kill() // it may be waiting for a QEMU that never connected
		}
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
	h.Accel, h.Link, h.CID, h.Vsock = l.Accel, l.Link, l.CID, l.Vsock
	v.mu.Lock()
	v.client, v.exited, v.reason, v.drained = client, exited, "", nil
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
