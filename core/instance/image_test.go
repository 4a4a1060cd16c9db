package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// fakeImages is an ImageSource holding images by alias.
type fakeImages map[string]*contract.Image

func (f fakeImages) Fingerprint(_ context.Context, ref string) (string, error) {
	for alias, im := range f {
		if ref == alias || ref == im.Fingerprint {
			return im.Fingerprint, nil
		}
	}
	return "", fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

func (f fakeImages) Spec(_ context.Context, fp string) (*contract.Image, error) {
	for _, im := range f {
		if im.Fingerprint == fp {
			c := *im
			return &c, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", fp, errdefs.ErrNotFound)
}

func (f fakeImages) Properties(_ context.Context, fp string) (map[string]string, error) {
	for _, im := range f {
		if im.Fingerprint == fp {
			return nil, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", fp, errdefs.ErrNotFound)
}

// TestCreateFromImage: an instance created from a store image records its
// fingerprint and the backend gets the image at create and at every start;
// a backend without disk.v1, a daemon without a store, an unknown image
// and a user-set volatile.base_image are refused.
func TestCreateFromImage(t *testing.T) {
	deb := &contract.Image{Fingerprint: strings.Repeat("ab", 32), Path: "/s/images/ab", Format: "raw", Kernel: "/s/images/ab.kernel"}
	e := newEnv(t)
	e.images = fakeImages{"debian-12": deb}
	e.m = e.manager()

	bad := []struct {
		name string
		disk bool
		req  CreateRequest
		kind error
		msg  string
	}{
		{"backend without disk.v1", false, CreateRequest{Name: "a", Image: "debian-12"}, errdefs.ErrInvalid, "does not announce disk.v1"},
		{"unknown image", true, CreateRequest{Name: "a", Image: "nope"}, errdefs.ErrNotFound, `image "nope"`},
		{"base image is the daemon's", true, CreateRequest{Name: "a", Config: map[string]string{KeyBaseImage: deb.Fingerprint}}, errdefs.ErrInvalid, "managed by the daemon"},
	}
	for _, b := range bad {
		e.be.disk = b.disk
		e.m = e.manager() // the manager caches the backend's info
		_, err := e.m.Create(bg, b.req, adminCaller)
		if !errors.Is(err, b.kind) || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%s: Create = %v, want %v saying %q", b.name, err, b.kind, b.msg)
		}
	}

	e.be.disk = true
	e.m = e.manager()
	inst, err := e.m.Create(bg, CreateRequest{Name: "vm1", Image: "debian-12", Start: true}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Config[KeyBaseImage] != deb.Fingerprint {
		t.Fatalf("config %v lacks %s", inst.Config, KeyBaseImage)
	}
	e.be.mu.Lock()
	var got *contract.Image
	for _, g := range e.be.guests {
		if g.uuid == inst.UUID {
			got = g.spec.Image
		}
	}
	e.be.mu.Unlock()
	if got == nil || *got != *deb {
		t.Fatalf("backend started the guest with image %+v, want %+v", got, deb)
	}

	plain := e.create("plain", nil)
	if plain.Config[KeyBaseImage] != "" {
		t.Fatalf("an instance without image has %s", KeyBaseImage)
	}

	e.images = nil
	e.m = e.manager()
	if _, err := e.m.Create(bg, CreateRequest{Name: "b", Image: "debian-12"}, adminCaller); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no image store") {
		t.Fatalf("Create without a store = %v", err)
	}
}
