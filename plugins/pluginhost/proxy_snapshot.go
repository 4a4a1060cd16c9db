package pluginhost

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/plugins/sdk"
)

var (
	_ sdk.Snapshotter = (*proxy)(nil)
	_ sdk.Adopter     = (*proxy)(nil)
)

// snapshotter returns the plugin's Snapshotter; a Backend without one (an
// in-process test double) answers sdk.ErrNotSupported.
func snapshotter(b sdk.Backend) (sdk.Snapshotter, error) {
	if s, ok := b.(sdk.Snapshotter); ok {
		return s, nil
	}
	return nil, fmt.Errorf("takes no snapshots: %w", sdk.ErrNotSupported)
}

// SnapshotCreate calls the plugin within the caller's budget (a stateful
// snapshot saves the guest's memory).
func (p *proxy) SnapshotCreate(ctx context.Context, h sdk.Handle, name string, stateful bool) (info *sdk.SnapshotInfo, err error) {
	err = p.call(ctx, "creating snapshot", long, 0, func(ctx context.Context, b sdk.Backend) error {
		s, err := snapshotter(b)
		if err == nil {
			info, err = s.SnapshotCreate(ctx, h, name, stateful)
		}
		return err
	})
	return info, err
}

// SnapshotRestore calls the plugin within the caller's budget (disks are copied).
func (p *proxy) SnapshotRestore(ctx context.Context, h sdk.Handle, name string, opts sdk.RestoreOptions) error {
	return p.call(ctx, "restoring snapshot", long, 0, func(ctx context.Context, b sdk.Backend) error {
		s, err := snapshotter(b)
		if err == nil {
			err = s.SnapshotRestore(ctx, h, name, opts)
		}
		return err
	})
}

// SnapshotDelete calls the plugin.
func (p *proxy) SnapshotDelete(ctx context.Context, h sdk.Handle, name string) error {
	return p.call(ctx, "deleting snapshot", long, 0, func(ctx context.Context, b sdk.Backend) error {
		s, err := snapshotter(b)
		if err == nil {
			err = s.SnapshotDelete(ctx, h, name)
		}
		return err
	})
}

// SnapshotRename calls the plugin.
func (p *proxy) SnapshotRename(ctx context.Context, h sdk.Handle, oldName, newName string) error {
	return p.call(ctx, "renaming snapshot", short, 0, func(ctx context.Context, b sdk.Backend) error {
		s, err := snapshotter(b)
		if err == nil {
			err = s.SnapshotRename(ctx, h, oldName, newName)
		}
		return err
	})
}

// Adopt calls the plugin.
func (p *proxy) Adopt(ctx context.Context, h sdk.Handle, from string, spec *sdk.GuestSpec) (nh sdk.Handle, err error) {
	err = p.call(ctx, "taking a guest of backend "+from, long, 0, func(ctx context.Context, b sdk.Backend) error {
		a, ok := b.(sdk.Adopter)
		if !ok {
			return fmt.Errorf("takes no guests of other backends: %w", sdk.ErrNotSupported)
		}
		nh, err = a.Adopt(ctx, h, from, spec)
		return err
	})
	return nh, err
}
