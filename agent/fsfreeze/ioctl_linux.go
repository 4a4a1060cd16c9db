package fsfreeze

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The ioctls of linux/fs.h: _IOWR('X', 119, int) and _IOWR('X', 120, int)
// in the generic encoding (amd64, arm64, riscv64; golang.org/x/sys/unix
// does not define them).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// sysIoctls freezes and thaws through the kernel.
type sysIoctls struct{}

var _ ioctls = sysIoctls{}

func (sysIoctls) freeze(dir string) error { return ioctlDir(dir, ioctlFIFREEZE) }
func (sysIoctls) thaw(dir string) error   { return ioctlDir(dir, ioctlFITHAW) }

// ioctlDir opens the mount point and sends it req.
func ioctlDir(dir string, req uint) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, req, 0); err != nil {
		return fmt.Errorf("ioctl on %s: %w", dir, err)
	}
	return nil
}
