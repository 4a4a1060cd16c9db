package qemuvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// Snapshots live in the guest's directory, one directory each:
//
//	<guest dir>/snapshots/<name>/<disk files>   copies of the guest's disks
//	<guest dir>/snapshots/<name>/state          memory state (stateful only)
//	<guest dir>/snapshots/<name>/state.json     its description (layout, link, memory)
//
// so deleting the guest deletes them, and moving the guest's directory to
// another QEMU backend (Adopt) moves them along.
const snapshotsDir = "snapshots"

var (
	_ sdk.Snapshotter = (*Backend)(nil)
	_ sdk.Adopter     = (*Backend)(nil)
)

// isDiskFile reports whether a file of a guest directory is one of the
// guest's disks, which snapshots copy: any *.qcow2, *.raw or *.img file but
// the boot initramfs (rewritten at every start).
func isDiskFile(name string) bool {
	if name == bootInitrd {
		return false
	}
	switch filepath.Ext(name) {
	case ".qcow2", ".raw", ".img":
		return true
	}
	return false
}

// diskFiles lists the disk files directly in dir.
func diskFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && isDiskFile(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// checkSnapshotName refuses names that are not a single path element.
func checkSnapshotName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00'\n") || strings.HasPrefix(name, ".") || len(name) > 255 {
		return fmt.Errorf("%w: snapshot name %q: want one path element, not starting with '.'", sdk.ErrInvalid, name)
	}
	return nil
}

// copyFile copies src to dst (created 0600, written through a temporary
// file then renamed) and returns the bytes copied.
func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// linkOrCopy hard-links src to dst (replacing dst), copying when the file
// system cannot link.
func linkOrCopy(src, dst string) error {
	os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	_, err := copyFile(src, dst)
	return err
}

// SnapshotCreate copies the guest's disks into the snapshot's directory
// (a running guest is paused meanwhile) and, with stateful, migrates the
// running guest's memory state there; a running guest then runs on.
func (b *Backend) SnapshotCreate(ctx context.Context, hb sdk.Handle, name string, stateful bool) (*sdk.SnapshotInfo, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("creating snapshot: %w", err)
	}
	if err := checkSnapshotName(name); err != nil {
		return nil, fmt.Errorf("creating snapshot of %q: %w", h.Name, err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	what := fmt.Sprintf("creating snapshot %q of %q", name, h.Name)
	final := filepath.Join(h.Dir, snapshotsDir, name)
	if _, err := os.Stat(final); err == nil {
		return nil, fmt.Errorf("%s: %w: it exists", what, sdk.ErrConflict)
	}
	running := h.running()
	if stateful && !running {
		return nil, fmt.Errorf("%s: %w: a stateful snapshot needs a running guest", what, sdk.ErrConflict)
	}
	disks, err := diskFiles(h.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	tmp := filepath.Join(h.Dir, snapshotsDir, ".tmp-"+name)
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	info := &sdk.SnapshotInfo{Details: map[string]string{"layout": string(h.Layout), "ring_port": h.Layout.RingPort()}}
	var c *qmp.Client
	if running && (stateful || len(disks) > 0) {
		if c, err = b.ensureQMP(ctx, h, v); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if err := c.Execute(ctx, "stop", nil, nil); err != nil {
			return nil, fmt.Errorf("%s: pausing the guest: %w", what, err)
		}
		// Run on whatever happens: a snapshot never leaves the guest paused.
		defer func() {
			if err := c.Execute(context.WithoutCancel(ctx), "cont", nil, nil); err != nil {
				b.log.Warn("resuming the guest after a snapshot", "name", h.Name, "error", err)
			}
		}()
	}
	if stateful {
		if err := b.saveStateTo(ctx, h, c, tmp); err != nil {
			return nil, fmt.Errorf("%s: saving the memory state: %w", what, err)
		}
		if st, err := os.Stat(filepath.Join(tmp, stateFile)); err == nil {
			info.StateBytes = st.Size()
		}
	}
	for _, d := range disks {
		n, err := copyFile(filepath.Join(h.Dir, d), filepath.Join(tmp, d))
		if err != nil {
			return nil, fmt.Errorf("%s: copying disk %s: %w", what, d, err)
		}
		info.DiskBytes += n
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ok = true
	b.log.Info("snapshot created", "name", h.Name, "snapshot", name, "stateful", stateful, "disks", len(disks), "state_bytes", info.StateBytes)
	return info, nil
}

// SnapshotRestore puts the snapshot's disks back into the stopped guest and
// its memory state as the guest's saved state (stateful), or discards any
// saved state (stateless). A state saved under the other layout is refused
// before anything changes.
func (b *Backend) SnapshotRestore(_ context.Context, hb sdk.Handle, name string, opts sdk.RestoreOptions) error {
	h, err := b.decode(hb)
	if err != nil {
		return fmt.Errorf("restoring snapshot: %w", err)
	}
	if err := checkSnapshotName(name); err != nil {
		return fmt.Errorf("restoring snapshot of %q: %w", h.Name, err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	what := fmt.Sprintf("restoring snapshot %q of %q", name, h.Name)
	if opts.Stateful {
		what += " with its state"
	}
	if h.running() && !opts.CheckOnly {
		return fmt.Errorf("%s: %w: the guest is running (pid %d)", what, sdk.ErrConflict, h.PID)
	}
	dir := filepath.Join(h.Dir, snapshotsDir, name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s: %w: no such snapshot", what, sdk.ErrNotFound)
	}
	if opts.Stateful {
		meta, err := readStateMeta(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w: the snapshot holds no memory state (it was taken without stateful); a stateless restore works", what, sdk.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if meta.Layout != b.opts.Layout {
			return fmt.Errorf("%s: %w: %w: the state was saved with the %s, this plugin uses the %s; QEMU cannot load it (Failed to load virtio-console). A stateless restore works: restore without the state",
				what, sdk.ErrConflict, ErrLayoutMismatch, meta.Layout.Describe(), b.opts.Layout.Describe())
		}
	}
	if opts.CheckOnly {
		return nil
	}
	disks, err := diskFiles(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, d := range disks {
		if _, err := copyFile(filepath.Join(dir, d), filepath.Join(h.Dir, d)); err != nil {
			return fmt.Errorf("%s: copying disk %s back: %w", what, d, err)
		}
	}
	if !opts.Stateful {
		os.Remove(filepath.Join(h.Dir, stateFile))
		os.Remove(filepath.Join(h.Dir, stateMeta))
		return nil
	}
	// The saved state is used once by the next start (which removes it):
	// link it, so the snapshot keeps its own copy.
	if err := linkOrCopy(filepath.Join(dir, stateFile), filepath.Join(h.Dir, stateFile)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := copyFile(filepath.Join(dir, stateMeta), filepath.Join(h.Dir, stateMeta)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// SnapshotDelete removes the snapshot's directory.
func (b *Backend) SnapshotDelete(_ context.Context, hb sdk.Handle, name string) error {
	h, err := b.decode(hb)
	if err != nil {
		return fmt.Errorf("deleting snapshot: %w", err)
	}
	if err := checkSnapshotName(name); err != nil {
		return fmt.Errorf("deleting snapshot of %q: %w", h.Name, err)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if err := os.RemoveAll(filepath.Join(h.Dir, snapshotsDir, name)); err != nil {
		return fmt.Errorf("deleting snapshot %q of %q: %w", name, h.Name, err)
	}
	return nil
}

// SnapshotRename renames the snapshot's directory.
func (b *Backend) SnapshotRename(_ context.Context, hb sdk.Handle, oldName, newName string) error {
	h, err := b.decode(hb)
	if err != nil {
		return fmt.Errorf("renaming snapshot: %w", err)
	}
	for _, n := range []string{oldName, newName} {
		if err := checkSnapshotName(n); err != nil {
			return fmt.Errorf("renaming snapshot of %q: %w", h.Name, err)
		}
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	what := fmt.Sprintf("renaming snapshot %q of %q to %q", oldName, h.Name, newName)
	from, to := filepath.Join(h.Dir, snapshotsDir, oldName), filepath.Join(h.Dir, snapshotsDir, newName)
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("%s: %w: no such snapshot", what, sdk.ErrNotFound)
	}
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("%s: %w: %q exists", what, sdk.ErrConflict, newName)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Adopt takes over a stopped guest of the other QEMU backend: the guest
// directory (disks, saved state, snapshots) moves from the other plugin's
// directory, a sibling of this one's, into this one's; the handle gets
// this backend's layout. A saved state or stateful snapshot keeps the
// layout it was saved under, so restoring it with state is refused later.
func (b *Backend) Adopt(_ context.Context, hb sdk.Handle, from string, spec *sdk.GuestSpec) (sdk.Handle, error) {
	what := fmt.Sprintf("backend %s taking a guest of backend %s", b.opts.Name, from)
	h, err := decodeHandle(hb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (only the QEMU backends' handles can be taken)", what, err)
	}
	what = fmt.Sprintf("backend %s taking guest %q of backend %s", b.opts.Name, h.Name, from)
	if spec != nil && spec.UUID != "" && spec.UUID != h.UUID {
		return nil, fmt.Errorf("%s: %w: the handle is of guest %s, the spec of %s", what, sdk.ErrInvalid, h.UUID, spec.UUID)
	}
	if filepath.Dir(filepath.Dir(h.Dir)) != filepath.Dir(b.opts.Dir) {
		return nil, fmt.Errorf("%s: %w: its directory %s is not in a plugin directory beside %s", what, sdk.ErrInvalid, h.Dir, b.opts.Dir)
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if h.running() {
		return nil, fmt.Errorf("%s: %w: it is running (pid %d); stop it first", what, sdk.ErrConflict, h.PID)
	}
	marker, err := os.ReadFile(filepath.Join(h.Dir, markerFile))
	if err != nil || strings.TrimSpace(string(marker)) != h.UUID {
		return nil, fmt.Errorf("%s: %w: %s is not the guest's directory", what, sdk.ErrInvalid, h.Dir)
	}
	dst := filepath.Join(b.opts.Dir, h.UUID)
	if dst != h.Dir {
		if n := len(filepath.Join(dst, qmpSocket)); n > sdk.MaxSocketPath {
			return nil, fmt.Errorf("%s: %w: socket path would be %d bytes, the limit is %d", what, sdk.ErrInvalid, n, sdk.MaxSocketPath)
		}
		if _, err := os.Stat(dst); err == nil {
			return nil, fmt.Errorf("%s: %w: %s exists", what, sdk.ErrConflict, dst)
		}
		if err := os.Rename(h.Dir, dst); err != nil {
			return nil, fmt.Errorf("%s: moving its directory: %w", what, err)
		}
	}
	nh := &handle{Version: handleVersion, UUID: h.UUID, Name: h.Name, Dir: dst, Layout: b.opts.Layout, CID: h.CID}
	b.log.Info("guest adopted", "name", h.Name, "from", from, "from_layout", h.Layout, "layout", nh.Layout)
	return nh.encode(), nil
}
