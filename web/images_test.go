package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/images"
)

// importingImages is an image store with imports in progress.
type importingImages struct {
	fakeImageList
	imports []images.ImportProgress
}

func (f importingImages) Imports() []images.ImportProgress { return f.imports }

// TestImagesPage: the images page lists the store's images and the
// imports in progress (name: alias, else file; bytes copied of the total
// and their percentage; a progress bar), and its imports section, fetched
// alone every 2 s, says so when none runs; the entry is in the navigation
// only with an image store, and the page is 404 without one.
func TestImagesPage(t *testing.T) {
	deb := &images.Image{Fingerprint: strings.Repeat("ab", 32), Aliases: []string{"debian-12"}, Format: "raw", Size: 2 << 30}
	started := time.Now().Add(-5 * time.Second)
	store := importingImages{fakeImageList: fakeImageList{list: []*images.Image{deb}}, imports: []images.ImportProgress{
		{Path: "/srv/trixie.img", Alias: "debian-13", Done: 768 << 20, Total: 1 << 30, Started: started},
		{Path: "/srv/other.qcow2", Done: 0, Total: 0, Started: started},
	}}
	inst := newFakeInstances()
	app, _ := newTestApp(inst, newBusEvents(), Config{Images: store})

	res, _, doc := get(t, app, "/images")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /images: %d", res.StatusCode)
	}
	if doc.Find(`nav a[href="/images"]`).Length() != 1 {
		t.Error("no Images entry in the navigation")
	}
	if got := doc.Find(`[data-testid="image"]`).Text(); !strings.Contains(got, "debian-12") || !strings.Contains(got, "abababababab") || !strings.Contains(got, "2.0 GiB") {
		t.Errorf("image row %q", got)
	}
	rows := doc.Find(`[data-testid="import"]`)
	if rows.Length() != 2 {
		t.Fatalf("%d import rows, want 2", rows.Length())
	}
	first := rows.First()
	if first.AttrOr("data-name", "") != "debian-13" || first.AttrOr("data-percent", "") != "75" || first.Find("progress").AttrOr("value", "") != "75" ||
		!strings.Contains(first.Text(), "768.0 MiB of 1.0 GiB (75%), started 5.") {
		t.Errorf("first import %q (name %q, percent %q)", first.Text(), first.AttrOr("data-name", ""), first.AttrOr("data-percent", ""))
	}
	if last := rows.Last(); last.AttrOr("data-name", "") != "other.qcow2" || last.AttrOr("data-percent", "") != "0" {
		t.Errorf("second import (no alias, nothing to copy yet) %q", last.Text())
	}
	if got := doc.Find(`#imports`).AttrOr("hx-get", ""); got != "/images/imports" {
		t.Errorf("the imports section refreshes from %q", got)
	}

	// The fragment alone, with no import running.
	app, _ = newTestApp(inst, newBusEvents(), Config{Images: importingImages{}})
	res, _, doc = get(t, app, "/images/imports")
	if res.StatusCode != http.StatusOK || doc.Find(`[data-testid="no-imports"]`).Length() != 1 || doc.Find(`[data-testid="import"]`).Length() != 0 {
		t.Fatalf("GET /images/imports with none running: %d", res.StatusCode)
	}

	// No image store: no entry, 404.
	app, _ = newTestApp(inst, newBusEvents(), Config{})
	res, _, doc = get(t, app, "/images")
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /images without a store: %d, want 404", res.StatusCode)
	}
	_, _, doc = get(t, app, "/")
	if doc.Find(`nav a[href="/images"]`).Length() != 0 {
		t.Error("an Images entry without an image store")
	}
}
