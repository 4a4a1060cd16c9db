package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// TestImageSourceSpec checks what a backend is told of an image: the
// store's files as an sdk.Image, over a real image store on SQLite. Tried:
// a qcow2 image imported with a kernel and an initrd (both paths, readable
// with their bytes), one without (no kernel, no initrd), and a fingerprint
// the store does not have (not found).
func TestImageSourceSpec(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := images.Open(filepath.Join(dir, "state"), dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withBoot, err := st.Import(ctx, write("a.qcow2", imagetest.QCOW2([]byte("a"))), images.ImportOptions{
		Kernel: write("vmlinuz", []byte("kernel bytes")), Initrd: write("initrd", []byte("initrd bytes")),
	})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := st.Import(ctx, write("b.qcow2", imagetest.QCOW2([]byte("b"))), images.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := imageSource{st}

	spec, err := src.Spec(ctx, withBoot.Fingerprint)
	if err != nil || spec.Fingerprint != withBoot.Fingerprint || spec.Format != images.FormatQCOW2 {
		t.Fatalf("Spec = %+v, %v", spec, err)
	}
	for path, want := range map[string]string{spec.Kernel: "kernel bytes", spec.Initrd: "initrd bytes", spec.Path: string(imagetest.QCOW2([]byte("a")))} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%q holds %q, %v; want %q", path, got, err, want)
		}
	}
	spec, err = src.Spec(ctx, bare.Fingerprint)
	if err != nil || spec.Path == "" || spec.Kernel != "" || spec.Initrd != "" {
		t.Errorf("Spec of an image without a kernel = %+v, %v", spec, err)
	}
	if _, err := src.Spec(ctx, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Spec of a missing image: %v, want not found", err)
	}
}
