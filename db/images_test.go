package db_test

import (
	"errors"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestImageStore runs the image store's metadata through every engine.
func TestImageStore(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t)).(images.MetadataStore)
			now := time.Now().UTC().Truncate(time.Microsecond)

			im := &images.Image{Fingerprint: hash(1), Filename: "debian-12.img", Size: 42, Format: "raw", Kernel: true, Initrd: true,
				Properties: map[string]string{"os": "debian", "release": "bookworm"}, CreatedAt: now}
			if err := s.CreateImage(ctx, im, "debian-12"); err != nil {
				t.Fatalf("CreateImage: %v", err)
			}
			bad := []struct {
				name  string
				im    *images.Image
				alias string
				want  error
			}{
				{"duplicate fingerprint", &images.Image{Fingerprint: hash(1), Filename: "x", Format: "raw"}, "", db.ErrAlreadyExists},
				{"duplicate alias", &images.Image{Fingerprint: hash(2), Filename: "x", Format: "raw"}, "debian-12", db.ErrAlreadyExists},
				{"short fingerprint", &images.Image{Fingerprint: "abc", Filename: "x", Format: "raw"}, "", db.ErrInvalid},
				{"unknown format", &images.Image{Fingerprint: hash(3), Filename: "x", Format: "vmdk"}, "", db.ErrInvalid},
				{"nil", nil, "", db.ErrInvalid},
			}
			for _, b := range bad {
				if err := s.CreateImage(ctx, b.im, b.alias); !errors.Is(err, b.want) {
					t.Errorf("%s: CreateImage = %v, want %v", b.name, err, b.want)
				}
			}
			if _, err := s.Image(ctx, hash(2)); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("a failed create left image 2 behind: %v", err)
			}
			got, err := s.Image(ctx, hash(1))
			if err != nil || got.Filename != "debian-12.img" || got.Properties["release"] != "bookworm" || !got.Kernel || !got.CreatedAt.Equal(now) {
				t.Fatalf("Image = %+v, %v", got, err)
			}
			if err := s.CreateImageAlias(ctx, "stable", hash(1), "the stable one"); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateImageAlias(ctx, "other", hash(9), ""); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("alias of a missing image: %v", err)
			}
			a, err := s.ImageAlias(ctx, "stable")
			if err != nil || a.Target != hash(1) || a.Name != "stable" || a.Description != "the stable one" {
				t.Fatalf("ImageAlias = %+v %v", a, err)
			}
			as, err := s.ImageAliases(ctx)
			if err != nil || len(as) != 2 || as[0].Name != "debian-12" || as[0].Target != hash(1) || as[1].Target != hash(1) {
				t.Fatalf("ImageAliases = %v %v", as, err)
			}
			if err := s.DeleteImageAlias(ctx, "stable"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteImageAlias(ctx, "stable"); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("second alias delete: %v", err)
			}
			// The public flag: private by default, set both ways, kept.
			if got.Public {
				t.Fatalf("a new image is public: %+v", got)
			}
			for _, public := range []bool{true, false, true} {
				if err := s.SetImagePublic(ctx, hash(1), public); err != nil {
					t.Fatalf("SetImagePublic(%t): %v", public, err)
				}
				if got, err := s.Image(ctx, hash(1)); err != nil || got.Public != public {
					t.Fatalf("after SetImagePublic(%t): %+v, %v", public, got, err)
				}
			}
			if err := s.SetImagePublic(ctx, hash(9), true); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("SetImagePublic of a missing image: %v", err)
			}
			if list, err := s.Images(ctx); err != nil || len(list) != 1 {
				t.Fatalf("Images = %d, %v", len(list), err)
			}
			if err := s.DeleteImage(ctx, hash(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ImageAlias(ctx, "debian-12"); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("alias outlived its image: %v", err)
			}
			if err := s.DeleteImage(ctx, hash(1)); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("second delete: %v", err)
			}
		})
	}
}
