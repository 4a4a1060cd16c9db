package web

import (
	"context"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// snapshotLister is implemented by instance services with snapshots
// (core/instance.Manager); without it the instance page lists none.
type snapshotLister interface {
	Snapshots(ctx context.Context, name string) ([]*instance.Snapshot, error)
}

var _ snapshotLister = (*instance.Manager)(nil)

// snapshotsOf returns an instance's snapshots for its page; a failure to
// list them leaves the list empty (the page still shows the instance).
func (d *Dashboard) snapshotsOf(ctx context.Context, name string) []api.InstanceSnapshot {
	l, ok := d.cfg.Instances.(snapshotLister)
	if !ok {
		return nil
	}
	list, err := l.Snapshots(ctx, name)
	if err != nil {
		return nil
	}
	return instance.WireSnapshots(list)
}
