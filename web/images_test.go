package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
)

// importingImages is an image store with imports in progress.
type importingImages struct {
	fakeImageList
	imports []images.ImportProgress
}

func (f importingImages) Imports() []images.ImportProgress { return f.imports }

// buildingImages is an image store with builds and imports in progress.
type buildingImages struct {
	importingImages
	builds []images.BuildProgress
}

func (f buildingImages) Builds() []images.BuildProgress { return f.builds }

// TestImagesPageBuilds: the builds and imports section shows each image
// build a client reports: a stage with bytes as bytes of the total, the
// rate and a bar; a stage without as its output lines; a build before its
// first stage as starting; a failed one with its error and no progress.
// The fragment the page fetches every 2 s shows the same.
func TestImagesPageBuilds(t *testing.T) {
	now := time.Now()
	started := now.Add(-90 * time.Second)
	store := buildingImages{builds: []images.BuildProgress{
		{ID: "a1", Name: "debian-12", Status: images.BuildRunning, Stage: "bootstrap and packages (mmdebstrap)", Step: 2, Lines: 314, Started: started, StageStarted: started, Updated: now},
		{ID: "b2", Name: "debian-13", Status: images.BuildRunning, Stage: "import", Step: 4, Done: 512 << 20, Total: 2 << 30, Started: started, StageStarted: now.Add(-4 * time.Second), Updated: now},
		{ID: "c3", Name: "debian-12", Status: images.BuildRunning, Started: started, StageStarted: started, Updated: started},
		{ID: "d4", Name: "debian-13", Status: images.BuildFailed, Stage: "filesystem", Step: 3, Error: "building debian-13 (make guest-image-debian-13): exit status 2", Started: started, Ended: now},
	}}
	app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{Images: store})
	for _, path := range []string{"/images", "/images/imports"} {
		res, _, doc := get(t, app, path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		rows := doc.Find(`[data-testid="build"]`)
		if rows.Length() != 4 || doc.Find(`[data-testid="no-imports"]`).Length() != 0 {
			t.Fatalf("GET %s: %d build rows, want 4 (and no 'nothing runs')", path, rows.Length())
		}
		lines := rows.Eq(0)
		if got := lines.Text(); lines.AttrOr("data-stage", "") != "bootstrap and packages (mmdebstrap)" || !strings.Contains(got, "build debian-12") ||
			!strings.Contains(got, "[2] bootstrap and packages (mmdebstrap)") || !strings.Contains(got, "314 lines of output, started 1m30s ago") || lines.Find("progress").Length() != 0 {
			t.Errorf("GET %s: a stage without bytes %q", path, got)
		}
		bytes := rows.Eq(1)
		if got := bytes.Find(`[data-testid="build-progress"]`).Text(); got != "512.0 MiB of 2.0 GiB (25%), 128.0 MiB/s, started 1m30s ago" || bytes.Find("progress").AttrOr("value", "") != "25" {
			t.Errorf("GET %s: a stage with bytes %q (bar %q)", path, got, bytes.Find("progress").AttrOr("value", ""))
		}
		if got := rows.Eq(2).Text(); !strings.Contains(got, "starting") {
			t.Errorf("GET %s: a build before its first stage %q", path, got)
		}
		failed := rows.Eq(3)
		if failed.AttrOr("data-status", "") != "failed" || failed.Find(`[data-testid="build-error"]`).Text() != "building debian-13 (make guest-image-debian-13): exit status 2" ||
			failed.Find(`[data-testid="build-progress"]`).Length() != 0 {
			t.Errorf("GET %s: a failed build %q", path, failed.Text())
		}
	}
}

// TestImagesPage: the images page lists the store's images and the
// imports in progress (name: alias, else file; bytes copied of the total
// and their percentage; a progress bar), and its imports section, fetched
// alone every 2 s, says so when none runs; the entry is in the navigation
// only with an image store, and the page is 404 without one.
func TestImagesPage(t *testing.T) {
	deb := &images.Image{Fingerprint: strings.Repeat("ab", 32), Aliases: []string{"debian-12"}, Format: "raw", Size: 2 << 30,
		Properties: map[string]string{instance.ImagePropMinMemory: "1GiB", instance.ImagePropMinDisk: "2GiB"}}
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
	if mem, disk := doc.Find(`[data-testid="image-min-memory"]`).Text(), doc.Find(`[data-testid="image-min-disk"]`).Text(); mem != "1GiB" || disk != "2GiB" {
		t.Errorf("the image's minimum memory %q and disk %q, want 1GiB and 2GiB", mem, disk)
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
