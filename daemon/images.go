package daemon

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// openImages opens the image store in the state directory (removing the
// temporary files of imports a previous daemon left). An image is in use
// while an instance's volatile.base_image names it.
func (d *Daemon) openImages() error {
	st, ok := d.store.(images.MetadataStore)
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

// imageSource is the image store as the instance service uses it
// (instance.ImageSource): core/images' store, whose images a backend is
// told in the plugin contract's terms (Spec).
type imageSource struct{ *images.Store }

var _ instance.ImageSource = imageSource{}

// Spec returns what a backend is told about the image fp: its Files as an
// sdk.Image.
func (s imageSource) Spec(ctx context.Context, fp string) (*sdk.Image, error) {
	f, err := s.Files(ctx, fp)
	if err != nil {
		return nil, err
	}
	return &sdk.Image{Fingerprint: f.Fingerprint, Path: f.Disk, Format: f.Format, Kernel: f.Kernel, Initrd: f.Initrd}, nil
}
