package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// TestImportHostSafety does to a real guestlinkd (--image-max-size 62GiB)
// what the probes of issue 23 did to its image import, each through the
// admin socket: a sparse file (copied sparse: allocated blocks about the
// source's data, the sha256 right), a FIFO nobody writes to (refused at
// once, 400 naming it: the test ends only if nothing waited for a
// writer), random bytes (400, nothing stored), a file over the limit
// (400), a CLI killed mid-copy of a 60 GiB sparse file (the copy stops
// and its temporary file goes), the daemon SIGKILLed mid-copy (the
// temporary file it left is removed at the next start), and an image
// larger than the store's filesystem, a real 32 MiB tmpfs (507 with the
// sizes and no host path, nothing left).
func TestImportHostSafety(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--image-max-size", "62GiB")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	store := filepath.Join(d.stateDir, "images")
	temporary := func() []string {
		m, _ := filepath.Glob(filepath.Join(store, ".import-*"))
		return m
	}
	imageCount := func() int {
		list, err := d.client.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	// refused checks that err is the daemon's answer code with want in
	// its message.
	refused := func(t *testing.T, err error, code int, want string) {
		t.Helper()
		var se *client.StatusError
		if !errors.As(err, &se) || se.Code != code || !strings.Contains(se.Message, want) {
			t.Fatalf("import answered %v, want %d with %q", err, code, want)
		}
		if left := temporary(); len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}

	t.Run("sparse", func(t *testing.T) {
		src := filepath.Join(dir, "sparse.img")
		regions := map[int64][]byte{0: imagetest.Ext(1 << 20), 1 << 30: imagetest.Random(2 << 20)}
		imagetest.Sparse(t, src, 2<<30, regions)
		sum := imagetest.Sum(2<<30, regions)
		im, err := d.client.ImportImage(ctx, api.ImagesPost{Path: src, Alias: "sparse"})
		if err != nil {
			t.Fatal(err)
		}
		if im.Fingerprint != sum || im.Size != 2<<30 {
			t.Fatalf("imported %s (%d bytes), want %s (2 GiB)", im.Fingerprint, im.Size, sum)
		}
		var srcSt, dstSt syscall.Stat_t
		if err := syscall.Stat(src, &srcSt); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(filepath.Join(store, sum), &dstSt); err != nil {
			t.Fatal(err)
		}
		t.Logf("2 GiB sparse file: source %d bytes allocated, stored %d", srcSt.Blocks*512, dstSt.Blocks*512)
		if dstSt.Blocks > srcSt.Blocks+16 { // 8 KiB of slack
			t.Fatalf("the stored file occupies %d bytes, the source %d", dstSt.Blocks*512, srcSt.Blocks*512)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := d.client.ImportImage(ctx, api.ImagesPost{Path: fifo})
		refused(t, err, 400, "a named pipe (FIFO) is not a regular file")
		// The CLI says so too, and exits.
		_, stderr, err := d.runCLI(ctx, "image", "import", fifo, "--alias", "pipe")
		if err == nil || !strings.Contains(stderr, "a named pipe (FIFO) is not a regular file") {
			t.Fatalf("guestlink image import FIFO: %v, stderr %q", err, stderr)
		}
	})

	t.Run("random bytes", func(t *testing.T) {
		src := filepath.Join(dir, "random.img")
		b := imagetest.Random(4 << 20)
		b[0] = 0x42 // no magic by chance
		if err := os.WriteFile(src, b, 0o600); err != nil {
			t.Fatal(err)
		}
		before := imageCount()
		_, err := d.client.ImportImage(ctx, api.ImagesPost{Path: src})
		refused(t, err, 400, "not a disk image: found unrecognised data (first bytes 42 ")
		if n := imageCount(); n != before {
			t.Fatalf("%d images after the refusal, %d before", n, before)
		}
	})

	t.Run("over the limit", func(t *testing.T) {
		src := filepath.Join(dir, "huge.img")
		imagetest.Sparse(t, src, 63<<30, map[int64][]byte{0: imagetest.Ext(1 << 20)})
		_, err := d.client.ImportImage(ctx, api.ImagesPost{Path: src})
		refused(t, err, 400, "the file is 63.0 GiB (its apparent size, holes included), more than the limit of 62.0 GiB (guestlinkd --image-max-size)")
	})

	// A 60 GiB sparse file: its copy (hashing 60 GiB) runs long enough to
	// be interrupted.
	big := filepath.Join(dir, "big.img")
	imagetest.Sparse(t, big, 60<<30, map[int64][]byte{0: imagetest.Ext(1 << 20)})
	t.Run("client gone", func(t *testing.T) {
		before := imageCount()
		cli := exec.Command(filepath.Join(binDir, "guestlink"), "image", "import", big)
		cli.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
		var stderr bytes.Buffer
		cli.Stderr = &stderr
		if err := cli.Start(); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the import's temporary file", opTimeout, func() bool { return len(temporary()) > 0 })
		_ = cli.Process.Kill()
		_ = cli.Wait()
		testwait.For(t, "the daemon to log the import stopped", opTimeout, func() bool {
			return strings.Contains(d.log(), "image import stopped: the request ended (client gone)")
		})
		if left := temporary(); len(left) != 0 {
			t.Fatalf("temporary files left after the copy stopped: %v", left)
		}
		if n := imageCount(); n != before {
			t.Fatalf("%d images after the interrupted import, %d before", n, before)
		}
	})

	t.Run("daemon killed", func(t *testing.T) {
		errc := make(chan error, 1)
		go func() {
			_, err := d.client.ImportImage(ctx, api.ImagesPost{Path: big})
			errc <- err
		}()
		testwait.For(t, "the import's temporary file", opTimeout, func() bool { return len(temporary()) > 0 })
		d.kill()
		if err := <-errc; err == nil {
			t.Fatal("the import succeeded although the daemon was killed")
		}
		left := temporary()
		if len(left) == 0 {
			t.Fatal("the killed daemon left no temporary file: the test proves nothing")
		}
		d.start()
		for _, p := range left {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s survived the restart: %v", p, err)
			}
		}
		if !strings.Contains(d.log(), "removed the temporary files of interrupted imports") {
			t.Fatal("the daemon did not log the removal")
		}
	})

	t.Run("no space", func(t *testing.T) {
		testenv.MountTmpfs(t, store, "32m")
		src := filepath.Join(dir, "40m.img")
		imagetest.Sparse(t, src, 64<<20, map[int64][]byte{0: imagetest.Ext(1 << 20), 1 << 20: imagetest.Random(39 << 20)})
		_, err := d.client.ImportImage(ctx, api.ImagesPost{Path: src})
		refused(t, err, 507, "not enough space in the image store: the image needs 40.0 MiB, ")
		if !errors.Is(err, errdefs.ErrNoSpace) {
			t.Fatalf("the client's error %v is not errdefs.ErrNoSpace", err)
		}
		for _, p := range []string{d.stateDir, dir} {
			if strings.Contains(err.Error(), p) {
				t.Fatalf("the 507 names the host path %s: %v", p, err)
			}
		}
		if entries, err := os.ReadDir(store); err != nil || len(entries) != 0 {
			t.Fatalf("the store's filesystem holds %d files after the refusal (%v)", len(entries), err)
		}
	})
}
