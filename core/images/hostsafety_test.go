package images_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/testenv"
	"golang.org/x/sys/unix"
)

// openStore opens a store in stateDir with lim.
func openStore(t *testing.T, stateDir string, lim images.Limits) *images.Store {
	t.Helper()
	s, err := images.Open(stateDir, dbtest.SQLite(t).(images.MetadataStore), nil, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sparseImage writes a file of apparent size size: a raw ext image's first
// MiB, then random bytes of each length of data at its offset, holes
// elsewhere. It returns the path.
func sparseImage(t *testing.T, path string, size int64, data map[int64]int) string {
	t.Helper()
	regions := map[int64][]byte{0: imagetest.Ext(1 << 20)}
	for off, n := range data {
		regions[off] = imagetest.Random(n)
	}
	imagetest.Sparse(t, path, size, regions)
	return path
}

// allocated returns the bytes the file at path occupies on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// storeFiles lists the names in the store's directory.
func storeFiles(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(images.Dir(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestSparseImport imports a 2 GiB file holding 3 MiB of data and 8 MiB of
// written zeros: the fingerprint is the file's sha256, the stored file
// holds the same bytes, and occupies about the source's data, not its
// apparent size (holes and zero blocks stay holes).
func TestSparseImport(t *testing.T) {
	dir := t.TempDir()
	const size = 2 << 30
	regions := map[int64][]byte{0: imagetest.Ext(1 << 20), 1 << 30: make([]byte, 8<<20)}
	for _, off := range []int64{512 << 20, 3<<29 + 12345} { // the second not block-aligned
		regions[off] = imagetest.Random(1 << 20)
	}
	src := filepath.Join(dir, "sparse.img")
	imagetest.Sparse(t, src, size, regions)
	want := imagetest.Sum(size, regions)
	offs := slices.Sorted(maps.Keys(regions))

	state := filepath.Join(dir, "state")
	s := openStore(t, state, images.Limits{})
	start := time.Now()
	im, err := s.Import(context.Background(), src, images.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if im.Fingerprint != want || im.Size != size || im.Format != images.FormatRaw {
		t.Fatalf("imported %s (%d bytes, %s), want sha256 %s, 2 GiB, raw", im.Fingerprint, im.Size, im.Format, want)
	}
	// The stored file: the same size, the regions' bytes, and data nowhere
	// else (a hole reads as zeros).
	stored := filepath.Join(images.Dir(state), im.Fingerprint)
	sf, err := os.Open(stored)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if fi, err := sf.Stat(); err != nil || fi.Size() != size {
		t.Fatalf("the stored file: %v, %v; want %d bytes", fi, err, size)
	}
	for off, b := range regions {
		got := make([]byte, len(b))
		if _, err := sf.ReadAt(got, off); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("the stored file differs in the %d bytes at %d (%v)", len(b), off, err)
		}
	}
	for off := int64(0); off < size; {
		data, err := sf.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		hole, err := sf.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(offs, func(o int64) bool { return o-blockSlack <= data && hole <= o+int64(len(regions[o]))+blockSlack }) {
			t.Fatalf("the stored file has data at [%d, %d), where the source has none", data, hole)
		}
		off = hole
	}
	srcAlloc, dstAlloc := allocated(t, src), allocated(t, stored)
	t.Logf("source: 2 GiB apparent, %d bytes allocated; stored in %v: %d bytes allocated", srcAlloc, took.Round(time.Millisecond), dstAlloc)
	// The data: 1 MiB of header and 2 MiB of random bytes (the second
	// chunk straddles a 4 KiB block at each end).
	if dstAlloc > 3<<20+64<<10 || dstAlloc > srcAlloc {
		t.Fatalf("the stored file occupies %d bytes; the source's data is 3 MiB (%d bytes allocated with its 8 MiB of zeros)", dstAlloc, srcAlloc)
	}
}

// blockSlack is how far around a region a copy's data may reach: the rest
// of its first and last 4 KiB blocks.
const blockSlack = 4096

// TestImportRefusesNonRegular: a FIFO (nobody ever writes to it: the test
// ends only if the import did not wait for a writer), a character device,
// a directory, a socket and a symbolic link to a FIFO are refused at once
// with ErrInvalid naming their type, as image, kernel or initrd.
func TestImportRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	img := filepath.Join(dir, "ok.img")
	if err := os.WriteFile(img, imagetest.Ext(1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	s := openStore(t, state, images.Limits{})
	for _, tc := range []struct {
		name, path string
		opts       images.ImportOptions
		want       string
	}{
		{"fifo", fifo, images.ImportOptions{}, "a named pipe (FIFO) is not a regular file"},
		{"symlink to a fifo", link, images.ImportOptions{}, "a named pipe (FIFO)"},
		{"character device", "/dev/null", images.ImportOptions{}, "a character device is not a regular file"},
		{"directory", dir, images.ImportOptions{}, "a directory is not a regular file"},
		{"socket", sock, images.ImportOptions{}, "a socket is not a regular file"},
		{"fifo as kernel", img, images.ImportOptions{Kernel: fifo}, "kernel " + fifo + ": a named pipe (FIFO)"},
		{"fifo as initrd", img, images.ImportOptions{Kernel: kernel, Initrd: fifo}, "initrd " + fifo + ": a named pipe (FIFO)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Import(context.Background(), tc.path, tc.opts)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Import = %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
	if files := storeFiles(t, state); len(files) != 0 {
		t.Fatalf("the store holds %v after refusals", files)
	}
}

// TestImportRefusesNonImages: files that are no raw ext or qcow2 image are
// refused with ErrInvalid saying what was found, before anything is
// written: nothing stored, no temporary file.
func TestImportRefusesNonImages(t *testing.T) {
	dir := t.TempDir()
	random := imagetest.Random(4 << 20)
	random[0], random[1] = 0x42, 0x42 // no magic by chance
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(imagetest.Ext(1 << 20))
	_ = zw.Close()
	gpt := make([]byte, 1<<20)
	copy(gpt[512:], "EFI PART")
	gpt[510], gpt[511] = 0x55, 0xAA
	qcowV1 := imagetest.QCOW2(nil)
	qcowV1[7] = 1
	badExt := imagetest.Ext(1 << 20)
	badExt[1024+0x18] = 9 // a block size of 512 KiB
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"random bytes", random, "found unrecognised data (first bytes 42 42 "},
		{"text", []byte("not an image\n"), "a file of 13 bytes, too small for an ext superblock"},
		{"empty", nil, "found an empty file"},
		{"zeros", make([]byte, 1<<20), "only zero bytes"},
		{"gzip", []byte(gz.String()), "gzip-compressed data (decompress it first)"},
		{"partitioned disk", gpt, "a partitioned disk (GPT)"},
		{"truncated ext", imagetest.Ext(1 << 20)[:512<<10], "an ext filesystem of 1.0 MiB in a file of 512.0 KiB: the file is truncated"},
		{"bad ext block size", badExt, "block size 2^9 KiB"},
		{"qcow2 version 1", qcowV1, "a qcow2 header of version 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(dir, tc.name)
			s := openStore(t, state, images.Limits{})
			path := filepath.Join(dir, tc.name+".img")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.Import(context.Background(), path, images.ImportOptions{})
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not a disk image") {
				t.Fatalf("Import = %v, want ErrInvalid with %q", err, tc.want)
			}
			if files := storeFiles(t, state); len(files) != 0 {
				t.Fatalf("the store holds %v after the refusal", files)
			}
		})
	}
}

// TestImportSizeLimit: the limit counts the apparent size: a sparse file
// of 2 GiB with 1 MiB of data is refused under a 1 GiB limit; one of 1 GiB
// is taken.
func TestImportSizeLimit(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	s := openStore(t, state, images.Limits{MaxSize: 1 << 30})
	big := sparseImage(t, filepath.Join(dir, "big.img"), 2<<30, nil)
	_, err := s.Import(context.Background(), big, images.ImportOptions{})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "the file is 2.0 GiB (its apparent size, holes included), more than the limit of 1.0 GiB (guestlinkd --image-max-size)") {
		t.Fatalf("Import of 2 GiB under a 1 GiB limit = %v", err)
	}
	if files := storeFiles(t, state); len(files) != 0 {
		t.Fatalf("the store holds %v after the refusal", files)
	}
	if _, err := s.Import(context.Background(), sparseImage(t, filepath.Join(dir, "ok.img"), 1<<30, nil), images.ImportOptions{}); err != nil {
		t.Fatalf("Import at the limit: %v", err)
	}
}

// TestImportNoSpace runs imports into a store on a real 32 MiB tmpfs
// (reserve: 5%, 1.6 MiB): an image with 40 MiB of data is refused before
// the copy; one with 20 MiB is refused during the copy when another
// writer fills the filesystem after the first check; both with
// ErrNoSpace, a message with the sizes and no host path, and nothing left
// in the store. Once the space is back the same image is taken.
func TestImportNoSpace(t *testing.T) {
	fs := testenv.Tmpfs(t, "32m")
	src := t.TempDir() // the sources are on the disk, not in the tmpfs
	state := filepath.Join(fs, "state")
	s := openStore(t, state, images.Limits{})
	big := sparseImage(t, filepath.Join(src, "big.img"), 64<<20, map[int64]int{1 << 20: 39 << 20})
	_, err := s.Import(context.Background(), big, images.ImportOptions{})
	if !errors.Is(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), "not enough space in the image store: the image needs 40.0 MiB, ") {
		t.Fatalf("Import of 40 MiB into 32 MiB = %v, want ErrNoSpace", err)
	}
	for _, p := range []string{fs, src} {
		if strings.Contains(err.Error(), p) {
			t.Errorf("the message names the host path %s: %v", p, err)
		}
	}
	if files := storeFiles(t, state); len(files) != 0 {
		t.Fatalf("the store holds %v after the refusal", files)
	}

	// During the copy: after the first check (1 MiB in), 16 MiB are
	// written beside the store.
	filler := filepath.Join(fs, "filler")
	checks := 0
	images.SetCheckHook(s, 1<<20, func() {
		checks++
		if checks == 1 {
			if err := os.WriteFile(filler, make([]byte, 16<<20), 0o600); err != nil {
				t.Errorf("filling the tmpfs: %v", err)
			}
		}
	})
	mid := sparseImage(t, filepath.Join(src, "mid.img"), 24<<20, map[int64]int{1 << 20: 19 << 20})
	_, err = s.Import(context.Background(), mid, images.ImportOptions{})
	if !errors.Is(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), "during the copy: not enough space in the image store") || checks != 1 {
		t.Fatalf("Import while the disk fills = %v after %d checks, want ErrNoSpace after 1", err, checks)
	}
	if strings.Contains(err.Error(), fs) || strings.Contains(err.Error(), src) {
		t.Errorf("the message names a host path: %v", err)
	}
	if files := storeFiles(t, state); len(files) != 0 {
		t.Fatalf("the store holds %v after the refusal", files)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	checks = 2 // no more filling
	if _, err := s.Import(context.Background(), mid, images.ImportOptions{}); err != nil {
		t.Fatalf("Import with the space back: %v", err)
	}
}

// TestImportStopsWithContext: the context ends mid-copy (after the first
// MiB of 8): the copy stops at once (no further check runs), Import
// answers the context's error and the temporary file, present while the
// copy ran, is gone when Import returns.
func TestImportStopsWithContext(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	s := openStore(t, state, images.Limits{})
	src := sparseImage(t, filepath.Join(dir, "x.img"), 8<<20, map[int64]int{1 << 20: 7 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	checks := 0
	var during []string
	images.SetCheckHook(s, 1<<20, func() {
		checks++
		during = storeFiles(t, state)
		cancel()
	})
	_, err := s.Import(ctx, src, images.ImportOptions{})
	if !errors.Is(err, context.Canceled) || checks != 1 {
		t.Fatalf("Import = %v after %d checks, want context.Canceled after 1", err, checks)
	}
	if len(during) != 1 || !strings.HasPrefix(during[0], ".import-") {
		t.Fatalf("the store held %v during the copy, want one temporary file", during)
	}
	if files := storeFiles(t, state); len(files) != 0 {
		t.Fatalf("the store holds %v after the copy stopped", files)
	}
}

// TestOpenRemovesTemporaryFiles: the temporary files an interrupted import
// left (image, kernel, initrd) are removed when the store is opened; those
// of an import still running in another process (its file locked) and
// the store's other files stay, until the lock is gone.
func TestOpenRemovesTemporaryFiles(t *testing.T) {
	state := t.TempDir()
	dir := images.Dir(state)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	left := []string{".import-123", ".import-123.kernel", ".import-123.initrd", ".import-789.kernel"}
	running := []string{".import-456", ".import-456.initrd"}
	for _, name := range append(append(left, running...), "keep") {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.Open(filepath.Join(dir, ".import-456"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	openStore(t, state, images.Limits{})
	if files := storeFiles(t, state); !slices.Equal(files, append(running, "keep")) {
		t.Fatalf("the store holds %v after Open, want %v and keep", files, running)
	}
	lock.Close()
	openStore(t, state, images.Limits{})
	if files := storeFiles(t, state); !slices.Equal(files, []string{"keep"}) {
		t.Fatalf("the store holds %v after Open with the lock gone, want only keep", files)
	}
}

// TestImportsInProgress: while an import copies (held at its free-space
// checks, every MiB of 7 MiB of data), Imports lists it with its alias,
// its file, the data copied so far (growing) and the data to copy (7 MiB
// and the header); a
// second import without an alias is named for its file; once Import
// returns, the list is empty again.
func TestImportsInProgress(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "state"), images.Limits{})
	src := sparseImage(t, filepath.Join(dir, "x.img"), 8<<20, map[int64]int{1 << 20: 7 << 20})
	if got := s.Imports(); len(got) != 0 {
		t.Fatalf("Imports before any import = %+v", got)
	}
	var seen [][]images.ImportProgress
	images.SetCheckHook(s, 1<<20, func() { seen = append(seen, s.Imports()) })
	for _, tc := range []struct{ alias, name string }{{"seven", "seven"}, {"", "x.img"}} {
		seen = nil
		if _, err := s.Import(context.Background(), src, images.ImportOptions{Alias: tc.alias}); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("Import %q: %v", tc.alias, err)
		}
		if len(seen) < 2 {
			t.Fatalf("import %q: %d checks ran, want several", tc.alias, len(seen))
		}
		last := int64(0)
		for i, list := range seen {
			if len(list) != 1 {
				t.Fatalf("import %q, check %d: Imports = %+v, want the one import", tc.alias, i, list)
			}
			p := list[0]
			if p.Path != src || p.Alias != tc.alias || p.Name() != tc.name || p.Total < 7<<20 || p.Total > 8<<20 || p.Started.IsZero() {
				t.Fatalf("import %q, check %d: %+v (name %q)", tc.alias, i, p, p.Name())
			}
			if p.Done <= last || p.Done > p.Total {
				t.Fatalf("import %q, check %d: done %d after %d of %d, want growing", tc.alias, i, p.Done, last, p.Total)
			}
			last = p.Done
		}
		if got := s.Imports(); len(got) != 0 {
			t.Fatalf("Imports after import %q returned = %+v", tc.alias, got)
		}
	}
}
