package daemon

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
)

// openStorage starts the storage service over the daemon's store.
func (d *Daemon) openStorage() (*storage.Service, error) {
	st, ok := d.store.(storage.Store)
	if !ok {
		return nil, fmt.Errorf("the store %T keeps no storage volumes: %w", d.store, errdefs.ErrNotSupported)
	}
	return storage.New(d.cfg.StateDir, st, nil, d.log.With("component", "storage"))
}

// volumeUsers returns the storage.UsedBy of the instance service: the
// instances with a disk device on the volume.
func volumeUsers(mgr *instance.Manager) storage.UsedBy {
	return func(ctx context.Context, pool, volume string) ([]string, error) {
		list, err := mgr.List(ctx, instance.ListFilter{})
		if err != nil {
			return nil, fmt.Errorf("looking up the users of storage volume %s/%s: %w", pool, volume, err)
		}
		var out []string
		for _, inst := range list {
			for _, dev := range inst.Devices {
				if dev["type"] == "disk" && dev["pool"] == pool && dev["source"] == volume {
					out = append(out, inst.Name)
					break
				}
			}
		}
		return out, nil
	}
}
