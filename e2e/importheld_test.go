package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/internal/testenv"
)

// The ioctls that freeze and thaw a filesystem (linux/fs.h: _IOWR('X',
// 119, int) and _IOWR('X', 120, int)), as fsfreeze(8) does: while frozen,
// every write to it waits.
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// mountLoopExt4 mounts a new ext4 filesystem of size bytes (a sparse
// file in a temporary directory, through a loop device) on dir: unlike a
// tmpfs, it can be frozen. The test's cleanup unmounts it (lazily) and
// the loop device goes with it. It needs root, mkfs.ext4 and loop
// devices (Requires otherwise).
func mountLoopExt4(t *testing.T, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Requires(t, "root", "mounting a loop filesystem needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		if mkfs, err = exec.LookPath("/sbin/mkfs.ext4"); err != nil {
			testenv.Requires(t, "mkfs.ext4", "e2fsprogs is installed by scripts/install-deps.sh")
		}
	}
	file := filepath.Join(t.TempDir(), "store.ext4")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", file).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop,nosuid,nodev", file, dir).CombinedOutput(); err != nil {
		testenv.Requires(t, "a loop device", "mount -o loop "+file+" failed: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the loop filesystem on %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// freeze freezes the filesystem mounted on dir until the returned thaw
// (also run by the test's cleanup, so a failing test never leaves a
// process waiting on it).
func freeze(t *testing.T, dir string) (thaw func()) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFIFREEZE, 0); errno != 0 {
		f.Close()
		t.Fatalf("freezing %s: %v", dir, errno)
	}
	thawed := false
	thaw = func() {
		if thawed {
			return
		}
		thawed = true
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFITHAW, 0); errno != 0 {
			t.Errorf("thawing %s: %v", dir, errno)
		}
		f.Close()
	}
	t.Cleanup(thaw)
	return thaw
}

// TestImportHeld holds a real daemon's import mid-copy, through the real
// CLI: the image store is a filesystem of its own (ext4 on a loop device)
// that the test freezes once the copy has begun, so the daemon's next
// write waits until the test thaws it (an explicit signal, not a slow
// file and a guessed time). Held, the import is listed by GET
// /1.0/images/imports with its alias and its bytes, some copied of the
// total, by guestlink image progress, and by the dashboard's Images page and the section it fetches
// every 2 s with the same bytes; thawed, the CLI's import completes, the
// image is stored, and the list is empty again.
func TestImportHeld(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--http", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	store := filepath.Join(d.stateDir, "images")
	mountLoopExt4(t, store, 512<<20)
	dash := newDashSession(ctx, t, d)

	// 1 MiB of ext header and 191 MiB of random data: every block is
	// written, and the copy takes long enough to be caught mid-way.
	src := filepath.Join(t.TempDir(), "held.img")
	const size = 192 << 20
	regions := map[int64][]byte{0: imagetest.Ext(1 << 20), 1 << 20: imagetest.Random(size - 1<<20)}
	imagetest.Sparse(t, src, size, regions)
	sum := imagetest.Sum(size, regions)

	cli := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "image", "import", src, "--alias", "held")
	cli.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
	cli.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cli.Stderr = &stderr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cli.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cli.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	// Freeze as soon as the daemon reports copied bytes: asked without a
	// pause, so the copy (192 MiB) is caught well before its end.
	var thaw func()
	for thaw == nil {
		list, err := d.client.ImageImports(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].Done > 0 {
			thaw = freeze(t, store)
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the import ended (%v) before it was seen copying; stderr %q", err, stderr.String())
		default:
		}
	}
	list, err := d.client.ImageImports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("held: %d imports listed, want 1: %+v", len(list), list)
	}
	held := list[0]
	if held.Name != "held" || held.Alias != "held" || held.Path != src || held.Total != size || held.Done <= 0 || held.Done >= held.Total {
		t.Fatalf("the held import is listed as %+v: want alias held, %s, some of %d bytes copied", held, src, size)
	}
	t.Logf("held at %d of %d bytes", held.Done, held.Total)
	for _, path := range []string{"/images", "/images/imports"} {
		code, body := dash.get(ctx, t, path)
		if code != http.StatusOK || !strings.Contains(body, `data-testid="import" data-name="held"`) || !strings.Contains(body, " of 192.0 MiB (") {
			t.Fatalf("GET %s: %d, the held import not shown with its bytes:\n%s", path, code, body)
		}
	}

	if out := d.cli(ctx, "image", "progress"); !regexp.MustCompile(`import +held +running +- +[0-9.]+MiB of 192\.0MiB `).MatchString(out) {
		t.Fatalf("guestlink image progress does not list the held import with its bytes:\n%s", out)
	}

	thaw()
	if err := <-exited; err != nil {
		t.Fatalf("guestlink image import after the thaw: %v; stderr %q", err, stderr.String())
	}
	exited <- nil // for the cleanup
	if list, err := d.client.ImageImports(ctx); err != nil || len(list) != 0 {
		t.Fatalf("imports after the import ended: %+v, %v", list, err)
	}
	im, err := d.client.Image(ctx, "held")
	if err != nil || im.Fingerprint != sum {
		t.Fatalf("the imported image: %+v, %v (want fingerprint %s)", im, err, sum)
	}
	if _, body := dash.get(ctx, t, "/images/imports"); !strings.Contains(body, `data-testid="no-imports"`) {
		t.Fatalf("the dashboard still shows an import:\n%s", body)
	}
}
