package web

import (
	"context"

	"github.com/guestlink/guestlink/core/instance"
)

// viewLister is implemented by instance services that hand out shared views
// (core/instance.Manager.ListFunc), as the admin API's list uses them.
type viewLister interface {
	ListFunc(ctx context.Context, f instance.ListFilter, fn func(*instance.Instance) error) error
}

var _ viewLister = (*instance.Manager)(nil)

// listRows returns the instances matching f, sorted by name, to be read
// only (rendered, counted, sorted): from a viewLister, shallow copies of
// its shared views, whose maps and times the manager replaces and never
// changes in place, so listing 10,000 instances for a page of 100 copies no
// map; else the service's List.
func (d *Dashboard) listRows(ctx context.Context, f instance.ListFilter) ([]*instance.Instance, error) {
	l, ok := d.cfg.Instances.(viewLister)
	if !ok {
		return d.cfg.Instances.List(ctx, f)
	}
	var views []instance.Instance
	if err := l.ListFunc(ctx, f, func(v *instance.Instance) error {
		views = append(views, *v)
		return nil
	}); err != nil {
		return nil, err
	}
	rows := make([]*instance.Instance, len(views))
	for i := range views {
		rows[i] = &views[i]
	}
	return rows, nil
}
