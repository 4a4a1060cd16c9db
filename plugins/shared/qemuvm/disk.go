package qemuvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// rootDisk is the guest's writable layer on its image: a qcow2 overlay in
// the guest directory (so it goes with the guest, and a snapshot of the
// directory's disk files takes it).
const rootDisk = "root.qcow2"

// imgBinary is the qemu-img binary (from PATH).
var imgBinary = "qemu-img"

// rootSize returns the size asked for the root disk: the "size" key of
// the disk device whose path is "/" (LXD's root device), in bytes; 0 when
// none is given. Errors wrap sdk.ErrInvalid.
func rootSize(devices map[string]sdk.Device) (int64, error) {
	for name, d := range devices {
		if d["type"] != "disk" || d["path"] != "/" || d["size"] == "" {
			continue
		}
		n, err := parseBytes(d["size"])
		if err != nil {
			return 0, fmt.Errorf("%w: device %q size %q: %v", sdk.ErrInvalid, name, d["size"], err)
		}
		return n, nil
	}
	return 0, nil
}

// parseBytes parses a size such as 10GiB, 512MiB, 2GB or 1073741824.
func parseBytes(s string) (int64, error) {
	num := strings.TrimRight(s, "kKMGTiB")
	unit := strings.TrimPrefix(s, num)
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a size such as 10GiB or 512MiB")
	}
	mult := map[string]int64{"": 1, "B": 1, "kB": 1e3, "KiB": 1 << 10, "MB": 1e6, "MiB": 1 << 20, "GB": 1e9, "GiB": 1 << 30, "TB": 1e12, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q (want B, kB, KiB, MB, MiB, GB, GiB, TB or TiB)", unit)
	}
	if n > (1<<50)/mult {
		return 0, errors.New("larger than 1 PiB")
	}
	return n * mult, nil
}

// checkImage validates the image a spec carries; errors wrap sdk.ErrInvalid.
func checkImage(im *sdk.Image) error {
	if im.Format != "raw" && im.Format != "qcow2" {
		return fmt.Errorf("%w: image %s: format %q, want raw or qcow2", sdk.ErrInvalid, im.Fingerprint, im.Format)
	}
	for what, p := range map[string]string{"file": im.Path, "kernel": im.Kernel, "initrd": im.Initrd} {
		if p == "" && what != "file" {
			continue
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: image %s: %s %q is not an absolute path", sdk.ErrInvalid, im.Fingerprint, what, p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: image %s: %s: %v", sdk.ErrInvalid, im.Fingerprint, what, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%w: image %s: %s %s is not a regular file", sdk.ErrInvalid, im.Fingerprint, what, p)
		}
	}
	return nil
}

// createOverlay creates dir/root.qcow2 backed by the image (read-only to
// the guest), grown to size bytes when size > 0.
func createOverlay(ctx context.Context, dir string, im *sdk.Image, size int64) error {
	if size > 0 {
		vsize, err := virtualSize(ctx, im)
		if err != nil {
			return err
		}
		if size < vsize {
			return fmt.Errorf("%w: the root disk size %d is smaller than the image (%d bytes)", sdk.ErrInvalid, size, vsize)
		}
	}
	args := []string{"create", "-q", "-f", "qcow2", "-b", im.Path, "-F", im.Format, filepath.Join(dir, rootDisk)}
	if size > 0 {
		args = append(args, strconv.FormatInt(size, 10))
	}
	cmd := exec.CommandContext(ctx, imgBinary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		return fmt.Errorf("creating the root disk overlay with %s: %w: %s", imgBinary, err, msg)
	}
	return nil
}

// diskArgs returns QEMU's arguments for the root disk in dir, "" if the
// guest has none.
func diskArgs(dir string) []string {
	p := filepath.Join(dir, rootDisk)
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	return []string{
		"-blockdev", "driver=file,filename=" + qemuOpt(p) + ",node-name=root-file,discard=unmap",
		"-blockdev", "driver=qcow2,file=root-file,node-name=root,discard=unmap",
		"-device", "virtio-blk-pci,drive=root,id=dev-root,bus=pcie.0,addr=0x5",
	}
}

// defaultsFor returns the kernel defaults of a guest: the image's kernel
// and initrd when its image carries them, else the plugin's. qemu.kernel
// and qemu.initrd override either.
func (b *Backend) defaultsFor(spec *sdk.GuestSpec) Defaults {
	if im := spec.Image; im != nil && im.Kernel != "" {
		return Defaults{Kernel: im.Kernel, Initrd: im.Initrd}
	}
	return b.opts.Defaults
}

// virtualSize returns the size of the disk the image holds.
func virtualSize(ctx context.Context, im *sdk.Image) (int64, error) {
	out, err := exec.CommandContext(ctx, imgBinary, "info", "--output=json", "-U", "-f", im.Format, im.Path).Output()
	if err != nil {
		return 0, fmt.Errorf("reading the size of image %s with %s: %w", im.Fingerprint, imgBinary, err)
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return 0, fmt.Errorf("reading the size of image %s: %w", im.Fingerprint, err)
	}
	return info.VirtualSize, nil
}
