package web

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/images"
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
	data := components.ImagesData{Meta: d.meta(c, "Images", "images"), Imports: d.importRows(time.Now())}
	for _, im := range list {
		data.Images = append(data.Images, components.ImageRow{
			Aliases: strings.Join(im.Aliases, ", "), Fingerprint: im.Fingerprint[:min(12, len(im.Fingerprint))],
			Format: im.Format, Size: byteSize(im.Size),
		})
	}
	return render(c, http.StatusOK, components.ImagesPage(data))
}

// importsFragment answers GET /images/imports: the imports section alone,
// which the images page fetches every 2 s.
func (d *Dashboard) importsFragment(c *fiber.Ctx) error {
	return render(c, http.StatusOK, components.ImportsSection(d.importRows(time.Now())))
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
