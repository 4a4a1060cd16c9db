package testenv

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (mount's syntax: "32m") on a new temporary
// directory and returns it (see MountTmpfs).
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	MountTmpfs(t, dir, size)
	return dir
}

// MountTmpfs mounts a tmpfs of size (mode 0700) on the directory dir, a
// small real filesystem to fill; the test's cleanup unmounts it (lazily,
// so a file a process still holds open does not keep it). Mounting needs
// root: without it, or where mount is refused (a container), the test ends
// with Requires (a failure under CI=true).
func MountTmpfs(t testing.TB, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Requires(t, "root", "mounting a tmpfs of "+size+" (a small real filesystem) needs root")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		Requires(t, "a tmpfs mount", "mount -t tmpfs -o size="+size+" "+dir+" failed: "+err.Error())
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the tmpfs on %s: %v", dir, err)
		}
	})
}
