// Package qemutest gates tests that boot real QEMU guests: RequiresQEMU
// skips (saying why; with CI=true it fails, see internal/testenv) when QEMU
// or the guest image is missing, and returns the
// image to boot. CI installs QEMU (scripts/install-deps.sh) and builds the
// image (make guest-image), so nothing skips there.
package qemutest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/plugins/shared/guestimage"
)

// EnvImageDir overrides where the guest image is looked for.
const EnvImageDir = "GUESTLINK_GUEST_IMAGE_DIR"

// Image is a guest image to boot.
type Image struct {
	Kernel   string // vmlinux when present, else the bzImage
	Initrd   string
	HasAgent bool // the initramfs carries the guestlink agent
	QEMU     string
}

// RequiresQEMU skips t (fails it with CI=true) unless qemu-system-x86_64 and the guest image (by
// default bin/guest/ of the module root) exist.
func RequiresQEMU(t testing.TB) Image {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testenv.Requires(t, "qemu-system-x86_64", "not installed (scripts/install-deps.sh installs qemu-system-x86)")
	}
	dir := os.Getenv(EnvImageDir)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			testenv.Requires(t, "the guest image", "cannot find the module root: "+err.Error())
		}
		dir = filepath.Join(root, "bin", "guest")
	}
	img := Image{Kernel: filepath.Join(dir, guestimage.KernelFile), Initrd: filepath.Join(dir, guestimage.InitrdFile), QEMU: bin}
	for _, f := range []string{img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			testenv.Requires(t, "the guest image", err.Error()+": run make guest-image")
		}
	}
	// The uncompressed kernel boots seconds faster under TCG.
	if vmlinux := filepath.Join(dir, guestimage.VmlinuxFile); fileExists(vmlinux) {
		img.Kernel = vmlinux
	}
	if _, err := os.Stat(filepath.Join(dir, guestimage.AgentFile)); err == nil {
		img.HasAgent = true
	}
	return img
}

// moduleRoot walks up from the working directory to the go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
