package qemuvm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"10GiB", 10 << 30, ""}, {"512MiB", 512 << 20, ""}, {"2GB", 2e9, ""}, {"1048576", 1 << 20, ""}, {"4KiB", 4096, ""},
		{"", 0, "want a size"}, {"-1GiB", 0, "want a size"}, {"1XB", 0, "want a size"}, {"1Gi", 0, `unknown unit "Gi"`},
		{"2000TiB", 0, "larger than 1 PiB"},
	} {
		got, err := parseBytes(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseBytes(%q) = %d, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// qemuImgInfo returns qemu-img's view of a disk file.
func qemuImgInfo(t *testing.T, path string) (virtualSize int64, backing, backingFmt string) {
	t.Helper()
	out, err := exec.Command(imgBinary, "info", "--output=json", "-U", path).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v", path, err)
	}
	var info struct {
		VirtualSize int64  `json:"virtual-size"`
		Backing     string `json:"backing-filename"`
		BackingFmt  string `json:"backing-filename-format"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	return info.VirtualSize, info.Backing, info.BackingFmt
}

// TestCreateWithImage: a guest created from an image gets a qcow2 overlay
// on it in its directory (grown by the root disk's size), booted as the
// virtio root disk; bad images and sizes are refused with nothing left
// behind, and Delete removes the overlay with the guest.
func TestCreateWithImage(t *testing.T) {
	if _, err := exec.LookPath(imgBinary); err != nil {
		testenv.Requires(t, imgBinary, "scripts/install-deps.sh installs qemu-utils")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.img")
	if err := os.WriteFile(raw, make([]byte, 4<<20), 0o400); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o400); err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: filepath.Join(dir, "g"), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Info(ctx); !info.Has(sdk.CapDisk) {
		t.Fatalf("capabilities %v lack %s", info.Capabilities, sdk.CapDisk)
	}
	img := &sdk.Image{Fingerprint: strings.Repeat("a", 64), Path: raw, Format: "raw", Kernel: kernel}
	root := func(size string) map[string]sdk.Device {
		return map[string]sdk.Device{"root": {"type": "disk", "path": "/", "pool": "default", "size": size}}
	}

	bad := []struct {
		name    string
		img     *sdk.Image
		devices map[string]sdk.Device
		kind    error
		msg     string
	}{
		{"missing file", &sdk.Image{Fingerprint: "f", Path: filepath.Join(dir, "none"), Format: "raw", Kernel: kernel}, nil, sdk.ErrInvalid, "no such file"},
		{"relative path", &sdk.Image{Fingerprint: "f", Path: "base.img", Format: "raw", Kernel: kernel}, nil, sdk.ErrInvalid, "not an absolute path"},
		{"unknown format", &sdk.Image{Fingerprint: "f", Path: raw, Format: "vmdk", Kernel: kernel}, nil, sdk.ErrInvalid, `format "vmdk"`},
		{"no kernel anywhere", &sdk.Image{Fingerprint: "f", Path: raw, Format: "raw"}, nil, sdk.ErrInvalid, "qemu.kernel is not set"},
		{"bad size", img, root("lots"), sdk.ErrInvalid, `device "root" size "lots"`},
		{"smaller than the image", img, root("1MiB"), sdk.ErrInvalid, "smaller than the image"},
	}
	for _, tc := range bad {
		_, err := b.Create(ctx, &sdk.GuestSpec{Name: "bad", UUID: newUUID(), Image: tc.img, Devices: tc.devices})
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Create = %v, want %v saying %q", tc.name, err, tc.kind, tc.msg)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "g")); len(entries) != 0 {
		t.Fatalf("failed creates left %d guest directories", len(entries))
	}

	for _, tc := range []struct {
		name string
		devs map[string]sdk.Device
		size int64
	}{{"image size", nil, 4 << 20}, {"grown", root("64MiB"), 64 << 20}} {
		spec := &sdk.GuestSpec{Name: "vm", UUID: newUUID(), Image: img, Devices: tc.devs}
		h, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		hd, _ := decodeHandle(h)
		overlay := filepath.Join(hd.Dir, rootDisk)
		size, backing, backingFmt := qemuImgInfo(t, overlay)
		if size != tc.size || backing != raw || backingFmt != "raw" {
			t.Fatalf("%s: overlay size %d backing %s (%s), want %d on %s (raw)", tc.name, size, backing, backingFmt, tc.size, raw)
		}
		cfg, err := ParseConfig(spec.Config, b.defaultsFor(spec))
		if err != nil || cfg.Kernel != kernel {
			t.Fatalf("%s: the image's kernel is not the default: %+v, %v", tc.name, cfg, err)
		}
		l := &launch{Name: "vm", UUID: spec.UUID, Dir: hd.Dir, Config: cfg, Accel: AccelTCG, Layout: LayoutCurrent, Link: sdk.LinkSerial}
		args := strings.Join(l.args(), " ")
		for _, want := range []string{"driver=file,filename=" + overlay, "virtio-blk-pci,drive=root", "root=/dev/vda rw", "-kernel " + kernel} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: command line lacks %q:\n%s", tc.name, want, args)
			}
		}
		if err := b.Delete(ctx, h); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(overlay); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: the overlay outlived its guest: %v", tc.name, err)
		}
	}
	// Without an image there is no root disk on the command line.
	l := &launch{Name: "vm", UUID: newUUID(), Dir: dir, Config: &Config{Kernel: kernel, MemoryMiB: 256, CPUs: 1}, Accel: AccelTCG, Layout: LayoutCurrent, Link: sdk.LinkSerial}
	if args := l.args(); slices.Contains(args, "-blockdev") || strings.Contains(strings.Join(args, " "), "root=/dev/vda") {
		t.Fatalf("a guest without image has a root disk: %v", args)
	}
}
