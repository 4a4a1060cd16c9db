package fsfreeze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// debianMounts is the mount table of a Debian 12 guest with a separate
// /boot, a bind mount of /srv, a read-only /mnt/ro, an NFS share and the
// usual pseudo filesystems.
const debianMounts = `22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 1 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
1 0 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
24 1 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=990412k,nr_inodes=247603,mode=755
26 24 0:24 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw
30 1 254:2 / /boot rw,relatime shared:30 - ext4 /dev/vda2 rw
31 1 254:3 / /srv/my\040data rw,relatime shared:31 - xfs /dev/vdb rw,attr2
32 1 254:3 / /var/lib/data rw,relatime shared:31 - xfs /dev/vdb rw,attr2
33 1 254:4 / /mnt/ro ro,relatime shared:33 - ext4 /dev/vdc rw
34 1 0:40 / /mnt/share rw,relatime shared:34 - nfs4 /export rw,vers=4.2
35 1 0:41 / /mnt/fuse rw,relatime shared:35 - fuse.sshfs /home/u rw
36 1 254:5 / /mnt/rosb rw,relatime shared:36 - ext4 /dev/vdd ro
`

func TestParseMountInfo(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(debianMounts))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 12 {
		t.Fatalf("parsed %d mounts, want 12", len(mounts))
	}
	got := mounts[6]
	want := Mount{ID: 31, Parent: 1, Dev: "254:3", Dir: "/srv/my data", FSType: "xfs", Source: "/dev/vdb"}
	if got != want {
		t.Errorf("escaped mount point: got %+v, want %+v", got, want)
	}
	if !mounts[8].ReadOnly || !mounts[11].ReadOnly || mounts[2].ReadOnly {
		t.Errorf("read-only flags (mount ro, superblock ro, rw root): %v %v %v", mounts[8].ReadOnly, mounts[11].ReadOnly, mounts[2].ReadOnly)
	}
	for _, tc := range []struct{ name, line, want string }{
		{"no separator", "1 0 254:1 / / rw ext4 /dev/vda1 rw", "separator"},
		{"short", "1 0 254:1 / - ext4", "too few"},
		{"bad id", "x 0 254:1 / / rw - ext4 /dev/vda1 rw", "mount id"},
		{"bad device", "1 0 254 / / rw - ext4 /dev/vda1 rw", "major:minor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMountInfo(strings.NewReader(tc.line + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseMountInfo(%q) = %v, want an error with %q", tc.line, err, tc.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(debianMounts))
	if err != nil {
		t.Fatal(err)
	}
	freeze, skipped := Plan(mounts)
	// "/" first in the plan (frozen last), the rest in mount order; the bind
	// mount of /dev/vdb, the read-only, network and FUSE mounts left out.
	if got, want := dirsOf(freeze), []string{"/", "/boot", "/srv/my data"}; !slices.Equal(got, want) {
		t.Errorf("plan = %q, want %q", got, want)
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Dir] = s.Reason
	}
	for dir, want := range map[string]string{"/var/lib/data": "another mount", "/mnt/ro": "read-only", "/mnt/rosb": "read-only",
		"/mnt/share": "network", "/mnt/fuse": "FUSE"} {
		if !strings.Contains(reasons[dir], want) {
			t.Errorf("skip reason of %s = %q, want it to say %q", dir, reasons[dir], want)
		}
	}
	if _, ok := reasons["/proc"]; ok {
		t.Errorf("pseudo filesystems are not reported as skipped: %v", reasons)
	}
}

// fakeIoctls records the calls and fails those in fail.
type fakeIoctls struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]error // "freeze /boot" -> error
}

func (f *fakeIoctls) do(op, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op+" "+dir)
	return f.fail[op+" "+dir]
}
func (f *fakeIoctls) freeze(dir string) error { return f.do("freeze", dir) }
func (f *fakeIoctls) thaw(dir string) error   { return f.do("thaw", dir) }
func (f *fakeIoctls) taken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// newTest returns a freezer of "/" over the test mount table and a fake of
// the ioctls, so that no filesystem of the host is ever frozen, with hooks
// read from a temporary directory.
func newTest(t *testing.T, ops *fakeIoctls) (*Freezer, string) {
	t.Helper()
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(debianMounts), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(dir, "hooks")
	f := New("/", nil)
	f.mountinfo, f.hookDir, f.ops = mi, hooks, ops
	return f, hooks
}

// writeHook writes an executable hook that appends "NAME ACTION" to log
// and exits with code.
func writeHook(t *testing.T, dir, name, log string, code int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"%s $1\" >> %s\necho hook %s said $1\nexit %d\n", name, log, name, code)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

func TestFreezeThawOrder(t *testing.T) {
	ops := &fakeIoctls{}
	f, hooks := newTest(t, ops)
	log := filepath.Join(t.TempDir(), "hooks.log")
	writeHook(t, hooks, "10-db", log, 0)
	writeHook(t, hooks, "20-app", log, 0)
	if err := os.WriteFile(filepath.Join(hooks, "README"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := f.Freeze(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/srv/my data", "/boot", "/"}; !slices.Equal(st.Frozen, want) {
		t.Errorf("frozen = %q, want %q (reverse mount order, / last)", st.Frozen, want)
	}
	if st.Timeout != 60 {
		t.Errorf("timeout = %d, want 60", st.Timeout)
	}
	if !f.Frozen() {
		t.Fatal("Frozen() = false after a freeze")
	}
	if _, err := f.Freeze(ctx, time.Minute); !errors.Is(err, ErrFrozen) {
		t.Fatalf("second freeze = %v, want ErrFrozen", err)
	}
	th, err := f.Thaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/", "/boot", "/srv/my data"}; !slices.Equal(th.Thawed, want) || th.Expired {
		t.Errorf("thaw = %+v, want thawed %q in mount order, not expired", th, want)
	}
	wantCalls := []string{"freeze /srv/my data", "freeze /boot", "freeze /", "thaw /", "thaw /boot", "thaw /srv/my data"}
	if got := ops.taken(); !slices.Equal(got, wantCalls) {
		t.Errorf("ioctls = %q, want %q", got, wantCalls)
	}
	if got, want := readLines(t, log), []string{"10-db_freeze", "20-app_freeze", "10-db_thaw", "20-app_thaw"}; !slices.Equal(got, want) {
		t.Errorf("hooks ran %q, want %q", got, want)
	}
	// A thaw with nothing frozen answers, and touches nothing.
	if th, err := f.Thaw(ctx); err != nil || len(th.Thawed) != 0 {
		t.Errorf("thaw of nothing = %+v, %v", th, err)
	}
	if got := ops.taken(); len(got) != len(wantCalls) {
		t.Errorf("a thaw of nothing sent ioctls: %q", got[len(wantCalls):])
	}
}

func TestFreezeFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("unsupported and busy filesystems are skipped", func(t *testing.T) {
		ops := &fakeIoctls{fail: map[string]error{"freeze /boot": syscall.EOPNOTSUPP, "freeze /srv/my data": syscall.EBUSY}}
		f, _ := newTest(t, ops)
		st, err := f.Freeze(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Frozen, []string{"/"}) || st.Timeout != int(DefaultTimeout/time.Second) {
			t.Errorf("freeze = %+v, want only / frozen with the default timeout", st)
		}
		th, err := f.Thaw(ctx)
		if err != nil || !slices.Equal(th.Thawed, []string{"/"}) {
			t.Errorf("thaw = %+v, %v: want only / thawed (the others were not ours)", th, err)
		}
	})
	t.Run("an ioctl error thaws what was frozen", func(t *testing.T) {
		ops := &fakeIoctls{fail: map[string]error{"freeze /": syscall.EIO}}
		f, hooks := newTest(t, ops)
		log := filepath.Join(t.TempDir(), "hooks.log")
		writeHook(t, hooks, "app", log, 0)
		_, err := f.Freeze(ctx, time.Minute)
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "freezing /") {
			t.Fatalf("freeze = %v, want EIO naming /", err)
		}
		want := []string{"freeze /srv/my data", "freeze /boot", "freeze /", "thaw /boot", "thaw /srv/my data"}
		if got := ops.taken(); !slices.Equal(got, want) {
			t.Errorf("ioctls = %q, want %q", got, want)
		}
		if f.Frozen() {
			t.Error("Frozen() after a failed freeze")
		}
		if got := readLines(t, log); !slices.Equal(got, []string{"app_freeze", "app_thaw"}) {
			t.Errorf("hooks ran %q, want freeze then thaw", got)
		}
	})
	t.Run("a failing freeze hook freezes nothing", func(t *testing.T) {
		ops := &fakeIoctls{}
		f, hooks := newTest(t, ops)
		log := filepath.Join(t.TempDir(), "hooks.log")
		writeHook(t, hooks, "10-ok", log, 0)
		writeHook(t, hooks, "20-bad", log, 3)
		writeHook(t, hooks, "30-never", log, 0)
		_, err := f.Freeze(ctx, time.Minute)
		if !errors.Is(err, ErrHook) || !strings.Contains(err.Error(), "20-bad") {
			t.Fatalf("freeze = %v, want ErrHook naming 20-bad", err)
		}
		if got := ops.taken(); len(got) != 0 {
			t.Errorf("ioctls after a failed hook: %q", got)
		}
		// The hook that had frozen its application is told to thaw it.
		if got, want := readLines(t, log), []string{"10-ok_freeze", "20-bad_freeze", "10-ok_thaw"}; !slices.Equal(got, want) {
			t.Errorf("hooks ran %q, want %q", got, want)
		}
	})
	t.Run("timeout out of range", func(t *testing.T) {
		f, _ := newTest(t, &fakeIoctls{})
		for _, d := range []time.Duration{-time.Second, MaxTimeout + time.Second} {
			if _, err := f.Freeze(ctx, d); err == nil || !strings.Contains(err.Error(), "outside") {
				t.Errorf("Freeze(%s) = %v, want a range error", d, err)
			}
		}
	})
}

// TestUnsupported: the agent of a simulated guest (its root a host
// directory) refuses to freeze and never reaches an ioctl.
func TestUnsupported(t *testing.T) {
	ops := &fakeIoctls{}
	f := New(t.TempDir(), nil)
	f.ops = ops
	if _, err := f.Freeze(context.Background(), time.Minute); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Freeze on a directory root = %v, want ErrUnsupported", err)
	}
	if _, err := f.Thaw(context.Background()); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Thaw on a directory root = %v, want ErrUnsupported", err)
	}
	if got := ops.taken(); len(got) != 0 {
		t.Fatalf("ioctls sent: %q", got)
	}
}

// TestTimeoutThaws: a freeze nobody thaws is thawed by the freezer at its
// timeout and not a moment before (fake clock), and the next thaw says the
// freeze had expired.
func TestTimeoutThaws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops := &fakeIoctls{}
		f, _ := newTest(t, ops)
		if _, err := f.Freeze(context.Background(), 90*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(90*time.Second - time.Millisecond)
		synctest.Wait()
		if !f.Frozen() {
			t.Fatal("thawed before the timeout")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if f.Frozen() {
			t.Fatal("still frozen after the timeout")
		}
		want := []string{"freeze /srv/my data", "freeze /boot", "freeze /", "thaw /", "thaw /boot", "thaw /srv/my data"}
		if got := ops.taken(); !slices.Equal(got, want) {
			t.Errorf("ioctls = %q, want %q", got, want)
		}
		th, err := f.Thaw(context.Background())
		if err != nil || !th.Expired || len(th.Thawed) != 0 {
			t.Fatalf("thaw after the timeout = %+v, %v; want expired and nothing left to thaw", th, err)
		}
		// A thaw in time stops the timer: nothing more happens after it.
		if _, err := f.Freeze(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if th, err := f.Thaw(context.Background()); err != nil || th.Expired {
			t.Fatalf("thaw in time = %+v, %v", th, err)
		}
		n := len(ops.taken())
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := ops.taken(); len(got) != n {
			t.Errorf("ioctls after a thaw in time: %q", got[n:])
		}
	})
}
