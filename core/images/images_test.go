package images_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/testenv"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// ext4Image builds a raw ext4 image in dir from a tree holding /boot files.
func ext4Image(t *testing.T, dir string, boot map[string]string) string {
	t.Helper()
	need(t, "mkfs.ext4")
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "boot"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range boot {
		if err := os.WriteFile(filepath.Join(root, "boot", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "disk with space.img")
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", root, img, "8M").CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return img
}

// need skips (fails under CI=true) a test whose command is missing.
func need(t *testing.T, cmd string) {
	t.Helper()
	if _, err := exec.LookPath(cmd); err != nil {
		testenv.Requires(t, cmd, "e2fsprogs is installed by scripts/install-deps.sh")
	}
}

func sum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func TestImportResolveDelete(t *testing.T) {
	need(t, "debugfs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state dir")
	st := dbtest.SQLite(t).(images.MetadataStore)
	inUse := map[string][]string{}
	s, err := images.Open(state, st, func(_ context.Context, fp string) ([]string, error) { return inUse[fp], nil }, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	withBoot := ext4Image(t, filepath.Join(dir, "a"), map[string]string{
		"vmlinuz-6.1.0-1-cloud-amd64": "old kernel", "vmlinuz-6.1.0-2-cloud-amd64": "new kernel",
		"initrd.img-6.1.0-2-cloud-amd64": "new initrd", "config-6.1.0-2-cloud-amd64": "x",
	})
	noBoot := ext4Image(t, filepath.Join(dir, "b"), nil)
	qcow := filepath.Join(dir, "c.qcow2")
	if err := os.WriteFile(qcow, imagetest.QCOW2(make([]byte, 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	qcow2 := filepath.Join(dir, "d.qcow2")
	if err := os.WriteFile(qcow2, imagetest.QCOW2(make([]byte, 101)), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}

	im, err := s.Import(ctx, withBoot, images.ImportOptions{Alias: "debian-12", Properties: map[string]string{"os": "debian"}})
	if err != nil {
		t.Fatal(err)
	}
	if im.Fingerprint != sum(t, withBoot) || im.Format != "raw" || !im.Kernel || !im.Initrd || im.Properties["boot.kernel"] != "vmlinuz-6.1.0-2-cloud-amd64" || im.Properties["os"] != "debian" {
		t.Fatalf("imported %+v", im)
	}
	spec, err := s.Files(ctx, im.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{spec.Kernel: "new kernel", spec.Initrd: "new initrd"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if got := sum(t, spec.Disk); got != im.Fingerprint {
		t.Fatalf("stored file's sum %s", got)
	}
	if fi, err := os.Stat(spec.Disk); err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("stored file mode %v, %v", fi.Mode(), err)
	}

	bare, err := s.Import(ctx, noBoot, images.ImportOptions{})
	if err != nil || bare.Kernel || bare.Initrd || bare.Filename != "disk with space.img" {
		t.Fatalf("image without /boot: %+v, %v", bare, err)
	}
	q, err := s.Import(ctx, qcow, images.ImportOptions{Alias: "q", Kernel: small})
	if err != nil || q.Format != "qcow2" || !q.Kernel || q.Initrd {
		t.Fatalf("qcow2 image: %+v, %v", q, err)
	}

	bad := []struct {
		name string
		path string
		opts images.ImportOptions
		want error
	}{
		{"same content", withBoot, images.ImportOptions{}, errdefs.ErrAlreadyExists},
		{"alias taken", qcow2, images.ImportOptions{Alias: "debian-12", Kernel: small}, errdefs.ErrAlreadyExists},
		{"no image", small, images.ImportOptions{}, errdefs.ErrInvalid},
		{"relative", "x.img", images.ImportOptions{}, errdefs.ErrInvalid},
		{"missing", filepath.Join(dir, "none"), images.ImportOptions{}, errdefs.ErrNotFound},
		{"directory", dir, images.ImportOptions{}, errdefs.ErrInvalid},
		{"bad alias", noBoot, images.ImportOptions{Alias: "a/b"}, errdefs.ErrInvalid},
		{"fingerprint-like alias", noBoot, images.ImportOptions{Alias: "deadbeef00"}, errdefs.ErrInvalid},
		{"initrd without kernel", noBoot, images.ImportOptions{Initrd: small}, errdefs.ErrInvalid},
	}
	for _, b := range bad {
		if _, err := s.Import(ctx, b.path, b.opts); !errors.Is(err, b.want) {
			t.Errorf("%s: Import = %v, want %v", b.name, err, b.want)
		}
	}
	entries, _ := os.ReadDir(images.Dir(state))
	if len(entries) != 6 { // 3 disks, 2 kernels, 1 initrd: no temp file left
		t.Errorf("store directory holds %d files after failed imports, want 6", len(entries))
	}

	for _, tc := range []struct {
		ref  string
		want string
		err  error
	}{
		{"debian-12", im.Fingerprint, nil},
		{im.Fingerprint, im.Fingerprint, nil},
		{im.Fingerprint[:12], im.Fingerprint, nil},
		{"q", q.Fingerprint, nil},
		{"nope", "", errdefs.ErrNotFound},
		{"", "", errdefs.ErrInvalid},
		{im.Fingerprint[:4], "", errdefs.ErrNotFound},
	} {
		got, err := s.Resolve(ctx, tc.ref)
		switch {
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("Resolve(%q) = %v, want %v", tc.ref, err, tc.err)
		case tc.err == nil && (err != nil || got.Fingerprint != tc.want):
			t.Errorf("Resolve(%q) = %v, %v", tc.ref, got, err)
		}
	}
	// Guests download public images only: an import is private until set.
	if _, _, err := s.ImageFile(ctx, im.Fingerprint); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("ImageFile of a private image = %v, want not found", err)
	}
	if pub, err := s.SetPublic(ctx, "debian-12", true); err != nil || !pub.Public {
		t.Fatalf("SetPublic = %+v, %v", pub, err)
	}
	if path, name, err := s.ImageFile(ctx, im.Fingerprint); err != nil || path != spec.Disk || name != "disk with space.img" {
		t.Fatalf("ImageFile = %s %s %v", path, name, err)
	}
	if got, err := s.Get(ctx, im.Fingerprint); err != nil || !got.Public {
		t.Fatalf("Get after SetPublic = %+v, %v", got, err)
	}
	if _, err := s.SetPublic(ctx, "nope", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("SetPublic of an unknown image = %v", err)
	}
	for _, fp := range []string{im.Fingerprint[:12], "x", strings.ToUpper(im.Fingerprint), bare.Fingerprint[:63] + "g"} {
		if _, _, err := s.ImageFile(ctx, fp); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("ImageFile(%q) = %v, want not found", fp, err)
		}
	}

	if err := s.AddAlias(ctx, "stable", im.Fingerprint, ""); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, im.Fingerprint)
	if err != nil || len(got.Aliases) != 2 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	inUse[im.Fingerprint] = []string{"vm1"}
	if err := s.Delete(ctx, im.Fingerprint); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Delete of an image in use = %v", err)
	}
	delete(inUse, im.Fingerprint)
	if err := s.Delete(ctx, im.Fingerprint); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{spec.Disk, spec.Kernel, spec.Initrd} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived its image: %v", p, err)
		}
	}
	if _, err := s.Resolve(ctx, "stable"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("alias outlived its image: %v", err)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 2 {
		t.Fatalf("List = %d, %v", len(list), err)
	}
}

// TestConcurrentImportsOfOneFile: of two imports of the same content at
// once, one stores it and the other is told it exists; the stored file
// stays.
func TestConcurrentImportsOfOneFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := images.Open(dir, dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "x.img")
	if err := os.WriteFile(src, imagetest.Ext(4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := s.Import(ctx, src, images.ImportOptions{Public: true}); errs <- err }()
	}
	var ok, exists int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, errdefs.ErrAlreadyExists):
			exists++
		default:
			t.Fatal(err)
		}
	}
	if ok != 1 || exists != 1 {
		t.Fatalf("%d imports stored, %d refused; want 1 and 1", ok, exists)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %d, %v", len(list), err)
	}
	path, _, err := s.ImageFile(ctx, list[0].Fingerprint)
	if err != nil || sum(t, path) != list[0].Fingerprint {
		t.Fatalf("the stored file is gone or changed: %v", err)
	}
}
