package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/instance"
)

// fakeImageList is an ImageLister over fixed images, or failing.
type fakeImageList struct {
	list []*images.Image
	err  error
}

func (f fakeImageList) List(context.Context) ([]*images.Image, error) { return f.list, f.err }

// TestLaunchFormChoices: the launch form opens on the daemon's default
// backend (not the first by name), offers the store's images by alias with
// the memory each needs, keeps host paths under a closed "advanced"
// disclosure (open when they hold a value or an error), keeps a posted
// image that is not listed, and falls back to a text field when the store
// cannot list.
func TestLaunchFormChoices(t *testing.T) {
	deb := &images.Image{Fingerprint: strings.Repeat("ab", 32), Properties: map[string]string{instance.ImagePropMinMemory: "1GiB"}, Aliases: []string{"debian-12"}}
	bare := &images.Image{Fingerprint: strings.Repeat("cd", 32), Properties: map[string]string{}}
	inst := newFakeInstances()
	ed := &fakeEditor{inst: inst}
	app, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed, DefaultBackend: "sim", Images: fakeImageList{list: []*images.Image{bare, deb}},
		Backends: fakeBackends{{Name: "fleet"}, {Name: "qemu"}, {Name: "sim"}}})
	s := openSession(t, app)

	res, _, doc := get(t, app, "/launch")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /launch: %d", res.StatusCode)
	}
	if got := doc.Find(`#launch-backend option[selected]`).AttrOr("value", ""); got != "sim" {
		t.Errorf("backend preselected %q, want the daemon's default sim (fleet is first by name)", got)
	}
	var opts []string
	for _, n := range doc.Find(`select#launch-image option`).Nodes {
		for _, a := range n.Attr {
			if a.Key == "value" {
				opts = append(opts, a.Val)
			}
		}
	}
	if strings.Join(opts, ",") != ","+bare.Fingerprint+",debian-12" {
		t.Errorf("image choices %q, want none, the bare image's fingerprint, debian-12", opts)
	}
	if got := doc.Find(`select#launch-image option[value="debian-12"]`).Text(); got != "debian-12 (abababababab), needs 1GiB of memory" {
		t.Errorf("debian-12's label %q", got)
	}
	if _, open := doc.Find(`[data-testid="launch-advanced"]`).Attr("open"); open {
		t.Error("the advanced part (host paths) starts open on an empty form")
	}
	if doc.Find(`[data-testid="launch-advanced"] #launch-kernel`).Length() != 1 {
		t.Error("the kernel path is not inside the advanced part")
	}

	// A refused post keeps what was chosen, an unlisted image included,
	// and opens the advanced part holding the error.
	form := url.Values{"name": {"x3"}, "backend": {"qemu"}, "image": {"other"}, "kernel": {"/k"}, "config": {"qemu.kernel=/k2"}, "_csrf": {s.token}}
	res, body, doc := do(t, app, post("/launch", form, s, nil))
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if _, open := doc.Find(`[data-testid="launch-advanced"]`).Attr("open"); !open {
		t.Error("the advanced part is closed although it holds the kernel's error")
	}
	if got := doc.Find(`select#launch-image option[selected]`).AttrOr("value", ""); got != "other" {
		t.Errorf("posted image %q not kept (selected %q)", "other", got)
	}
	if got := doc.Find(`#launch-backend option[selected]`).AttrOr("value", ""); got != "qemu" {
		t.Errorf("posted backend not kept: %q", got)
	}

	// A store that cannot list leaves a text field: the form still works.
	app2, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed, Images: fakeImageList{err: errors.New("db down")}})
	_, _, doc = get(t, app2, "/launch")
	if doc.Find(`input#launch-image`).Length() != 1 {
		t.Error("no image text field when the store cannot list")
	}
}
