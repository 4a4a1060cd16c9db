package qemuvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// fileBackend returns a backend on root/<name> whose guests are never
// started (the snapshot file handling needs no QEMU), and a created guest.
func fileBackend(t *testing.T, root, name string, layout Layout) (*Backend, sdk.Handle, string) {
	t.Helper()
	kernel := filepath.Join(root, "vmlinux")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Name: name, Layout: layout, Dir: filepath.Join(root, name), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	uuid := "0f0e0d0c-0b0a-4908-8706-050403020100"
	h, err := b.Create(context.Background(), &sdk.GuestSpec{Name: "g1", UUID: uuid, Config: map[string]string{KeyKernel: kernel}})
	if err != nil {
		t.Fatal(err)
	}
	return b, h, filepath.Join(b.opts.Dir, uuid)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, kind error, parts ...string) {
	t.Helper()
	if kind == nil {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, kind) {
		t.Errorf("%s: err = %v, want %v", what, err, kind)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not contain %q", what, err, p)
		}
	}
}

// TestSnapshotFiles checks what snapshots copy and restore on a stopped
// guest: every disk file (not the boot initramfs), the saved state
// discarded by a stateless restore and linked in by a stateful one, and
// the refusals: duplicate, bad names, stateful of a stopped guest, a
// stateful restore of a stateless snapshot or of a state saved under the
// other layout (before anything changes), unknown snapshots.
func TestSnapshotFiles(t *testing.T) {
	ctx := context.Background()
	b, h, dir := fileBackend(t, t.TempDir(), "qemu", LayoutCurrent)
	write(t, filepath.Join(dir, "root.qcow2"), "disk-v1")
	write(t, filepath.Join(dir, "data.raw"), "data-v1")
	write(t, filepath.Join(dir, bootInitrd), "initrd")

	info, err := b.SnapshotCreate(ctx, h, "s1", false)
	if err != nil {
		t.Fatal(err)
	}
	if info.DiskBytes != int64(len("disk-v1")+len("data-v1")) || info.StateBytes != 0 || info.Details["layout"] != "current" {
		t.Errorf("SnapshotInfo = %+v", info)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotsDir, "s1", bootInitrd)); !os.IsNotExist(err) {
		t.Errorf("the boot initramfs was copied into the snapshot (stat err %v)", err)
	}
	// A stateful snapshot taken under the legacy layout (as a moved guest has).
	write(t, filepath.Join(dir, snapshotsDir, "legacy", stateFile), "memory")
	write(t, filepath.Join(dir, snapshotsDir, "legacy", stateMeta), `{"layout":"legacy","link":"serial"}`)
	write(t, filepath.Join(dir, snapshotsDir, "current", stateFile), "memory")
	write(t, filepath.Join(dir, snapshotsDir, "current", stateMeta), `{"layout":"current","link":"serial"}`)

	for _, tc := range []struct {
		what  string
		run   func() error
		kind  error
		parts []string
	}{
		{"duplicate", func() error { _, err := b.SnapshotCreate(ctx, h, "s1", false); return err }, sdk.ErrConflict, []string{"exists"}},
		{"slash", func() error { _, err := b.SnapshotCreate(ctx, h, "a/b", false); return err }, sdk.ErrInvalid, nil},
		{"dot-dot", func() error { _, err := b.SnapshotCreate(ctx, h, "..", false); return err }, sdk.ErrInvalid, nil},
		{"stateful of a stopped guest", func() error { _, err := b.SnapshotCreate(ctx, h, "s2", true); return err }, sdk.ErrConflict, []string{"running guest"}},
		{"restore unknown", func() error { return b.SnapshotRestore(ctx, h, "nope", sdk.RestoreOptions{}) }, sdk.ErrNotFound, nil},
		{"stateful restore of a stateless snapshot", func() error {
			return b.SnapshotRestore(ctx, h, "s1", sdk.RestoreOptions{Stateful: true})
		}, sdk.ErrConflict, []string{"no memory state", "stateless restore works"}},
		{"stateful restore across layouts (check only)", func() error {
			return b.SnapshotRestore(ctx, h, "legacy", sdk.RestoreOptions{Stateful: true, CheckOnly: true})
		}, ErrLayoutMismatch, []string{ringproto.PortCurrent, ringproto.PortLegacy, "stateless restore works"}},
		{"stateful restore across layouts", func() error {
			return b.SnapshotRestore(ctx, h, "legacy", sdk.RestoreOptions{Stateful: true})
		}, sdk.ErrConflict, []string{ringproto.PortLegacy}},
		{"rename unknown", func() error { return b.SnapshotRename(ctx, h, "nope", "x") }, sdk.ErrNotFound, nil},
		{"rename onto existing", func() error { return b.SnapshotRename(ctx, h, "s1", "legacy") }, sdk.ErrConflict, nil},
		{"foreign handle", func() error {
			_, err := b.SnapshotCreate(ctx, []byte(`{"v":1,"uuid":"0f0e0d0c-0b0a-4908-8706-050403020100","dir":"/tmp/0f0e0d0c-0b0a-4908-8706-050403020100","layout":"current"}`), "x", false)
			return err
		}, sdk.ErrInvalid, []string{"outside"}},
	} {
		wantErr(t, tc.what, tc.run(), tc.kind, tc.parts...)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); !os.IsNotExist(err) {
		t.Errorf("a refused restore left a saved state (stat err %v)", err)
	}

	// Stateless restore: disks back, a saved state discarded.
	write(t, filepath.Join(dir, "root.qcow2"), "disk-v2-longer")
	write(t, filepath.Join(dir, stateFile), "old state")
	write(t, filepath.Join(dir, stateMeta), `{"layout":"current"}`)
	if err := b.SnapshotRestore(ctx, h, "s1", sdk.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "root.qcow2")); string(got) != "disk-v1" {
		t.Errorf("disk after restore = %q", got)
	}
	if st, _ := b.State(ctx, h); st.HasSavedState {
		t.Error("a stateless restore kept the saved state")
	}
	// Stateful restore: the state is the guest's saved state, the
	// snapshot keeps its own.
	if err := b.SnapshotRestore(ctx, h, "current", sdk.RestoreOptions{Stateful: true}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.State(ctx, h); !st.HasSavedState {
		t.Error("a stateful restore left no saved state")
	}
	os.Remove(filepath.Join(dir, stateFile)) // as a start does
	if got, err := os.ReadFile(filepath.Join(dir, snapshotsDir, "current", stateFile)); err != nil || !bytes.Equal(got, []byte("memory")) {
		t.Errorf("the snapshot's state after a start used it: %q, %v", got, err)
	}
	// Rename and delete.
	wantErr(t, "rename", b.SnapshotRename(ctx, h, "s1", "s3"), nil)
	wantErr(t, "delete", b.SnapshotDelete(ctx, h, "s3"), nil)
	wantErr(t, "delete again", b.SnapshotDelete(ctx, h, "s3"), nil)
	if _, err := os.Stat(filepath.Join(dir, snapshotsDir, "s3")); !os.IsNotExist(err) {
		t.Errorf("deleted snapshot: stat err %v", err)
	}
	// Deleting the guest deletes its snapshots.
	wantErr(t, "delete guest", b.Delete(ctx, h), nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("guest directory after Delete: stat err %v", err)
	}
}

// TestAdopt moves a stopped legacy guest, with its disk, saved state and
// snapshots, to a current-layout backend beside it, and checks the
// refusals: handles that are not QEMU handles (naming the other backend),
// guests outside a sibling plugin directory.
func TestAdopt(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	legacy, h, dir := fileBackend(t, root, "qemu-legacy", LayoutLegacy)
	write(t, filepath.Join(dir, "root.qcow2"), "disk")
	if _, err := legacy.SnapshotCreate(ctx, h, "s1", false); err != nil {
		t.Fatal(err)
	}
	current, err := New(Options{Name: "qemu", Layout: LayoutCurrent, Dir: filepath.Join(root, "qemu"), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := New(Options{Name: "qemu", Layout: LayoutCurrent, Dir: filepath.Join(root, "x", "y", "qemu"), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		b     *Backend
		h     sdk.Handle
		parts []string
	}{
		{"not a handle", current, sdk.Handle("garbage"), []string{"backend qemu", "backend qemu-legacy", "not a qemu handle"}},
		{"sim handle", current, sdk.Handle(`{"v":1,"id":"x","dir":"/tmp/x"}`), []string{"qemu-legacy"}},
		{"not a sibling", elsewhere, h, []string{"not in a plugin directory beside"}},
	} {
		_, err := tc.b.Adopt(ctx, tc.h, "qemu-legacy", &sdk.GuestSpec{})
		wantErr(t, tc.what, err, sdk.ErrInvalid, tc.parts...)
	}
	nh, err := current.Adopt(ctx, h, "qemu-legacy", &sdk.GuestSpec{UUID: "0f0e0d0c-0b0a-4908-8706-050403020100"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := current.decode(nh)
	if err != nil || got.Layout != LayoutCurrent || got.Dir != filepath.Join(root, "qemu", got.UUID) {
		t.Fatalf("adopted handle %+v, %v", got, err)
	}
	for _, f := range []string{"root.qcow2", filepath.Join(snapshotsDir, "s1", "root.qcow2"), markerFile} {
		if _, err := os.Stat(filepath.Join(got.Dir, f)); err != nil {
			t.Errorf("after the move: %v", err)
		}
	}
	if _, err := legacy.State(ctx, h); err != nil {
		t.Logf("the old handle: %v", err) // its directory is gone; nothing to assert
	}
	if st, err := current.State(ctx, nh); err != nil || st.Details["ring_port"] != ringproto.PortCurrent {
		t.Errorf("State of the adopted guest: %+v, %v", st, err)
	}
}
