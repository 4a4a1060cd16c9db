package daemon

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
)

// openImages opens the image store in the state directory (removing the
// temporary files of imports a previous daemon left). An image is in use
// while an instance's volatile.base_image names it.
func (d *Daemon) openImages() error {
	st, ok := d.store.(db.ImageStore)
	if !ok {
		return fmt.Errorf("the store %T keeps no images", d.store)
	}
	inUse := func(ctx context.Context, fp string) ([]string, error) {
		list, err := d.store.ListInstances(ctx, record.Filter{})
		if err != nil {
			return nil, fmt.Errorf("listing the instances using image %s: %w", fp, err)
		}
		var out []string
		for _, in := range list {
			if in.Config[instance.KeyBaseImage] == fp {
				out = append(out, in.Name)
			}
		}
		return out, nil
	}
	var err error
	d.images, err = images.Open(d.cfg.StateDir, st, inUse, d.log.With("component", "images"), images.Limits{MaxSize: d.cfg.ImageMaxSize})
	return err
}
