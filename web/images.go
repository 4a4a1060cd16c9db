package web

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/web/components"
)

// ImportLister lists the image imports in progress (*images.Store); the
// images page shows them when Config.Images is one.
type ImportLister interface {
	Imports() []images.ImportProgress
}

// imagesPage answers GET /images: the imports in progress and the store's
// images (404 when the dashboard has no image store).
func (d *Dashboard) imagesPage(c *fiber.Ctx) error {
	if d.cfg.Images == nil {
		return fiber.NewError(http.StatusNotFound, "this daemon has no image store")
	}
	list, err := d.cfg.Images.List(c.UserContext())
	if err != nil {
		return d.fail(c, err)
	}
	now := time.Now()
	data := components.ImagesData{Meta: d.meta(c, "Images", "images"), Builds: d.buildRows(now), Imports: d.importRows(now)}
	for _, im := range list {
		data.Images = append(data.Images, components.ImageRow{
			Aliases: strings.Join(im.Aliases, ", "), Fingerprint: im.Fingerprint[:min(12, len(im.Fingerprint))],
			Format: im.Format, Size: byteSize(im.Size),
			MinMemory: im.Properties[instance.ImagePropMinMemory], MinDisk: im.Properties[instance.ImagePropMinDisk],
		})
	}
	return render(c, http.StatusOK, components.ImagesPage(data))
}

// importsFragment answers GET /images/imports: the builds and imports
// section alone, which the images page fetches every 2 s.
func (d *Dashboard) importsFragment(c *fiber.Ctx) error {
	now := time.Now()
	return render(c, http.StatusOK, components.ImportsSection(d.buildRows(now), d.importRows(now)))
}

// BuildLister lists the image builds clients run and report
// (*images.Store); the images page shows them when Config.Images is one.
type BuildLister interface {
	Builds() []images.BuildProgress
}

// buildRows returns the image builds as the page shows them: a stage with
// bytes as bytes of the total, the rate and a bar; one without, as its
// output lines.
func (d *Dashboard) buildRows(now time.Time) []components.BuildRow {
	l, ok := d.cfg.Images.(BuildLister)
	if !ok {
		return nil
	}
	var rows []components.BuildRow
	for _, b := range l.Builds() {
		r := components.BuildRow{
			ID: b.ID, Name: b.Name, Status: b.Status, Stage: b.Stage, Step: b.Step, Error: b.Error,
			Since: components.Ago(&b.Started, now), Percent: -1,
		}
		switch {
		case b.Total > 0:
			r.Percent = int(min(100, b.Done*100/b.Total))
			r.Progress = fmt.Sprintf("%s of %s (%d%%), %s/s", byteSize(b.Done), byteSize(b.Total), r.Percent, byteSize(int64(b.Rate())))
		case b.Done > 0:
			r.Progress = fmt.Sprintf("%s, %s/s", byteSize(b.Done), byteSize(int64(b.Rate())))
		default:
			r.Progress = fmt.Sprintf("%d lines of output", b.Lines)
		}
		rows = append(rows, r)
	}
	return rows
}

// importRows returns the imports in progress as the page shows them.
func (d *Dashboard) importRows(now time.Time) []components.ImportRow {
	l, ok := d.cfg.Images.(ImportLister)
	if !ok {
		return nil
	}
	var rows []components.ImportRow
	for _, p := range l.Imports() {
		pct := 0
		if p.Total > 0 {
			pct = int(min(100, p.Done*100/p.Total))
		}
		rows = append(rows, components.ImportRow{
			Name: p.Name(), Done: byteSize(p.Done), Total: byteSize(p.Total), Percent: pct,
			Since: components.Ago(&p.Started, now),
		})
	}
	return rows
}

// byteSize writes n bytes for people: "1.5 GiB", "12.0 MiB", "300 B".
func byteSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int64(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
