package qemuvm

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
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// stateMetaDoc describes a saved state.
type stateMetaDoc struct {
	Layout    Layout       `json:"layout"`
	Link      sdk.LinkKind `json:"link"`
	Vsock     string       `json:"vsock,omitempty"` // the vsock device ("" before qemu.vsock: kernel)
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

// saveState pauses the guest and migrates its state to the guest's state file.
func (b *Backend) saveState(ctx context.Context, h *handle, c *qmp.Client) error {
	return b.saveStateTo(ctx, h, c, h.Dir)
}

// saveStateTo pauses the guest and migrates its state to dir's state file
// (with its description); the guest stays paused.
func (b *Backend) saveStateTo(ctx context.Context, h *handle, c *qmp.Client, dir string) error {
	if h.Vsock == VsockUser {
		// QEMU marks vhost-user-vsock unmigratable ("State blocked by
		// non-migratable device"): say so before pausing anything.
		return fmt.Errorf("%w: QEMU cannot save the state of the vhost-user-vsock device (%s=user); stop or snapshot the guest without its state, or use %s=kernel", sdk.ErrNotSupported, KeyVsock, KeyVsock)
	}
	if err := c.Execute(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if strings.ContainsAny(dir, "'\x00\n") {
		return fmt.Errorf("saving state: %w: unusable directory %q", sdk.ErrInvalid, dir)
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
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
			meta := stateMetaDoc{Layout: h.Layout, Link: h.Link, Vsock: h.Vsock, MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Accel: h.Accel, Saved: time.Now().UTC()}
			mb, _ := json.Marshal(meta)
			if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, stateMeta), mb, 0o600)
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
