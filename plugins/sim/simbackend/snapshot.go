package simbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// The sim takes stateless snapshots only: a simulated guest has no disk and
// its memory is a process, so a snapshot is what the daemon keeps (config,
// devices) plus a small record in <guest dir>/snapshots/<name>/snapshot.json,
// deleted with the guest.

var _ sdk.Snapshotter = (*Backend)(nil)

const snapshotsDir = "snapshots"

// snapshotDir checks name and returns its directory.
func snapshotDir(h *handle, name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return "", fmt.Errorf("snapshot name %q: want one path element, not starting with '.': %w", name, sdk.ErrInvalid)
	}
	return filepath.Join(h.Dir, snapshotsDir, name), nil
}

// SnapshotCreate records a stateless snapshot; stateful is ErrNotSupported.
func (b *Backend) SnapshotCreate(_ context.Context, raw sdk.Handle, name string, stateful bool) (*sdk.SnapshotInfo, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("creating snapshot: %w", err)
	}
	if stateful {
		return nil, fmt.Errorf("creating snapshot %q of %q: the sim backend takes no stateful snapshots: %w", name, h.Name, sdk.ErrNotSupported)
	}
	dir, err := snapshotDir(h, name)
	if err != nil {
		return nil, fmt.Errorf("creating snapshot of %q: %w", h.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("creating snapshot %q of %q: %w", name, h.Name, err)
	}
	if err := os.Mkdir(dir, 0o700); errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating snapshot %q of %q: it exists: %w", name, h.Name, sdk.ErrConflict)
	} else if err != nil {
		return nil, fmt.Errorf("creating snapshot %q of %q: %w", name, h.Name, err)
	}
	data, _ := json.Marshal(map[string]any{"name": name, "created": time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(dir, "snapshot.json"), data, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("creating snapshot %q of %q: %w", name, h.Name, err)
	}
	return &sdk.SnapshotInfo{Details: map[string]string{}}, nil
}

// SnapshotRestore checks the snapshot exists and the guest is stopped;
// there is nothing of the guest's to put back.
func (b *Backend) SnapshotRestore(ctx context.Context, raw sdk.Handle, name string, opts sdk.RestoreOptions) error {
	h, err := b.guest(raw)
	if err != nil {
		return fmt.Errorf("restoring snapshot: %w", err)
	}
	if opts.Stateful {
		return fmt.Errorf("restoring snapshot %q of %q with its state: the sim backend keeps no memory state: %w", name, h.Name, sdk.ErrNotSupported)
	}
	dir, err := snapshotDir(h, name)
	if err != nil {
		return fmt.Errorf("restoring snapshot of %q: %w", h.Name, err)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("restoring snapshot %q of %q: no such snapshot: %w", name, h.Name, sdk.ErrNotFound)
	}
	if opts.CheckOnly {
		return nil
	}
	if _, err := liveStatus(ctx, h.paths()); err == nil {
		return fmt.Errorf("restoring snapshot %q of %q: the guest is running: %w", name, h.Name, sdk.ErrConflict)
	} else if !errors.Is(err, simvm.ErrNotRunning) {
		return fmt.Errorf("restoring snapshot %q of %q: %w", name, h.Name, err)
	}
	return nil
}

// SnapshotDelete removes the snapshot's record.
func (b *Backend) SnapshotDelete(_ context.Context, raw sdk.Handle, name string) error {
	h, err := b.guest(raw)
	if err != nil {
		return fmt.Errorf("deleting snapshot: %w", err)
	}
	dir, err := snapshotDir(h, name)
	if err != nil {
		return fmt.Errorf("deleting snapshot of %q: %w", h.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting snapshot %q of %q: %w", name, h.Name, err)
	}
	return nil
}

// SnapshotRename renames the snapshot's record.
func (b *Backend) SnapshotRename(_ context.Context, raw sdk.Handle, oldName, newName string) error {
	h, err := b.guest(raw)
	if err != nil {
		return fmt.Errorf("renaming snapshot: %w", err)
	}
	from, err := snapshotDir(h, oldName)
	if err != nil {
		return fmt.Errorf("renaming snapshot of %q: %w", h.Name, err)
	}
	to, err := snapshotDir(h, newName)
	if err != nil {
		return fmt.Errorf("renaming snapshot of %q: %w", h.Name, err)
	}
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("renaming snapshot %q of %q: no such snapshot: %w", oldName, h.Name, sdk.ErrNotFound)
	}
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("renaming snapshot %q of %q: %q exists: %w", oldName, h.Name, newName, sdk.ErrConflict)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("renaming snapshot %q of %q: %w", oldName, h.Name, err)
	}
	return nil
}
