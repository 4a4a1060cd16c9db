package e2e

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
)

// TestQEMUImage boots a guest from the image store: an ext4 disk image
// holding the test guest's kernel and initramfs in /boot is imported (the
// daemon takes the kernel and initrd out of it), launched without
// qemu.kernel on a qcow2 overlay, reaches Ready; the image cannot be
// deleted while the instance uses it, and the overlay goes with the
// instance.
func TestQEMUImage(t *testing.T) {
	d, img := newQEMUDaemon(t)
	for _, cmd := range []string{"mkfs.ext4", "debugfs", "qemu-img"} {
		if _, err := exec.LookPath(cmd); err != nil {
			testenv.Requires(t, cmd, "scripts/install-deps.sh installs e2fsprogs and qemu-utils")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()

	// The disk image: /boot/vmlinuz-* and /boot/initrd.img-* as a distribution has them.
	dir := t.TempDir()
	root := filepath.Join(dir, "root", "boot")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{img.Kernel: "vmlinuz-6.1.0-test", img.Initrd: "initrd.img-6.1.0-test"} {
		if err := os.Link(src, filepath.Join(root, dst)); err != nil {
			data, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(root, dst), data, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	disk := filepath.Join(dir, "busybox.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", filepath.Join(dir, "root"), disk, "128M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}

	im, err := d.client.ImportImage(ctx, api.ImagesPost{Path: disk, Alias: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if !im.Kernel || !im.Initrd || im.Properties["boot.kernel"] != "vmlinuz-6.1.0-test" {
		t.Fatalf("imported %+v: no kernel and initrd taken from /boot", im)
	}

	const name = "vm-image"
	port := freePort(t)
	devices := map[string]map[string]string{
		"root": {"type": "disk", "path": "/", "size": "256MiB"},
		"eth0": {"type": "nic", "nictype": "user", "hostfwd": fmt.Sprintf("tcp::%d-:22", port)},
	}
	start := time.Now()
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Image: "busybox", Start: true,
		Config: map[string]string{"qemu.accel": "auto"}, Devices: devices}); err != nil {
		t.Fatalf("launching from the image: %v", err)
	}
	inst := d.waitInstance(ctx, name, "Ready", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})
	t.Logf("%s: Ready %v after launch (accel %s)", name, time.Since(start).Round(time.Millisecond), inst.Details["accel"])
	if inst.Config["volatile.base_image"] != im.Fingerprint {
		t.Errorf("volatile.base_image = %q, want %s", inst.Config["volatile.base_image"], im.Fingerprint)
	}
	overlay := filepath.Join(filepath.Dir(inst.Details["console_log"]), "root.qcow2")
	if fi, err := os.Stat(overlay); err != nil {
		t.Fatalf("no overlay next to the console log: %v", err)
	} else {
		t.Logf("overlay %s: %d bytes after boot (image %d bytes)", overlay, fi.Size(), im.Size)
	}

	if out, err := exec.Command("qemu-img", "info", "--output=json", "-U", overlay).Output(); err != nil || !strings.Contains(string(out), `"virtual-size": 268435456`) {
		t.Errorf("overlay is not 256 MiB: %v\n%s", err, out)
	}
	// The forward listens on the loopback address only.
	if addr := tcpListener(t, port); addr != "127.0.0.1" {
		t.Errorf("the ssh forward listens on %q, want 127.0.0.1 only", addr)
	}

	var se *client.StatusError
	if err := d.client.DeleteImage(ctx, "busybox"); !errors.As(err, &se) || se.Code != 409 {
		t.Fatalf("deleting an image in use = %v, want 409", err)
	}
	if err := d.client.Delete(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(overlay); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the overlay outlived its instance: %v", err)
	}
	if err := d.client.DeleteImage(ctx, "busybox"); err != nil {
		t.Fatalf("deleting the unused image: %v", err)
	}
}

// freePort returns a TCP port free on 127.0.0.1 right now.
// tcpListener returns the IPv4 address a socket listening on port is bound
// to, from /proc/net/tcp ("" if none listens).
func tcpListener(t *testing.T, port int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" { // LISTEN
			continue
		}
		addr, p, ok := strings.Cut(f[1], ":")
		if n, _ := strconv.ParseUint(p, 16, 16); !ok || int(n) != port {
			continue
		}
		b, err := hex.DecodeString(addr)
		if err != nil || len(b) != 4 {
			t.Fatalf("bad /proc/net/tcp address %q", f[1])
		}
		return net.IPv4(b[3], b[2], b[1], b[0]).String()
	}
	return ""
}
