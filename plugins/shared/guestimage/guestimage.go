// Package guestimage builds the small bootable guest the QEMU backends boot:
// Debian's cloud kernel unpacked from its package (never installed), an
// initramfs with busybox-static, the virtio modules, the static guestlink
// agent and an /init that prepares the guest without udev. It also writes
// the config-drive archive the backends append to the initramfs at each
// start.
//
// The build's steps by file: guestimage.go (Build: the pipeline and its
// cache), apt.go (fetching and unpacking the kernel package), bzimage.go
// (extracting vmlinux from the bzImage, LZ4), cpio.go (newc archives: the
// initramfs and the config drive).
package guestimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cavaliergopher/cpio"
)

//go:embed rootfs
var rootfs embed.FS

// Modules are the kernel modules put into the initramfs, in the order /init
// loads them (the unpacked package has no modules.dep). The vsock ones are
// loaded only for the vsock link.
var Modules = []string{
	"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
	"virtio_pci", "virtio_console", "virtio_blk", "button", "evdev",
	"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
}

// File names in the output directory.
const (
	KernelFile = "vmlinuz"
	// VmlinuxFile is the uncompressed kernel (ELF, booted through PVH),
	// which saves QEMU's guest the decompression: seconds under TCG.
	VmlinuxFile = "vmlinux"
	InitrdFile  = "initrd.img"
	AgentFile   = "guestlink-agent"
	// DevlxdGetFile is the guest's /dev/lxd/sock GET tool (built with the agent).
	DevlxdGetFile = "devlxdget"
)

// Options configures Build.
type Options struct {
	// OutDir receives vmlinuz, initrd.img and the cached kernel package.
	OutDir string
	// SourceDir is the module root; the agent is built from
	// SourceDir/cmd/guestlink-agent when that directory exists.
	SourceDir string
	// KernelPackage is the meta package whose versioned dependency is
	// unpacked; default linux-image-cloud-amd64.
	KernelPackage string
	// KernelDeb, if set, is a kernel .deb to use instead of downloading one.
	KernelDeb string
	// Busybox is the static busybox binary; default /bin/busybox.
	Busybox string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Image is a built guest.
type Image struct {
	Kernel    string // path of the kernel (bzImage)
	Vmlinux   string // path of the uncompressed kernel, "" if it could not be extracted
	Initrd    string // path of the initramfs (gzip'd newc cpio)
	Release   string // kernel release, e.g. "6.1.0-56-cloud-amd64"
	HasAgent  bool   // whether the agent is in the initramfs
	Rebuilt   bool   // whether the initramfs was written by this call
	AgentPath string // the agent binary built, if any
}

// Build builds (or finds up to date) the guest image in opts.OutDir.
func Build(ctx context.Context, opts Options) (*Image, error) {
	if opts.OutDir == "" {
		return nil, errors.New("building guest image: no output directory")
	}
	if opts.KernelPackage == "" {
		opts.KernelPackage = "linux-image-cloud-amd64"
	}
	if opts.Busybox == "" {
		opts.Busybox = "/bin/busybox"
	}
	logf := func(format string, a ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "guest-image: "+format+"\n", a...)
		}
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	kdir, release, err := kernelTree(ctx, opts, logf)
	if err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	img := &Image{
		Kernel:  filepath.Join(opts.OutDir, KernelFile),
		Initrd:  filepath.Join(opts.OutDir, InitrdFile),
		Release: release,
	}
	if err := copyIfChanged(filepath.Join(kdir, "boot", "vmlinuz-"+release), img.Kernel); err != nil {
		return nil, fmt.Errorf("building guest image: copying kernel: %w", err)
	}
	vmlinux := filepath.Join(opts.OutDir, VmlinuxFile)
	if st, err := os.Stat(vmlinux); err == nil && !olderThan(st.ModTime(), img.Kernel) {
		img.Vmlinux = vmlinux
	} else if err := extractVmlinux(ctx, img.Kernel, vmlinux); err != nil {
		logf("no uncompressed kernel (booting the bzImage instead): %v", err)
		os.Remove(vmlinux)
	} else {
		img.Vmlinux = vmlinux
		logf("extracted %s", vmlinux)
	}

	var entries []entry
	walkErr := fs.WalkDir(rootfs, "rootfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "rootfs" {
			return err
		}
		name := strings.TrimPrefix(p, "rootfs/")
		if d.IsDir() {
			entries = append(entries, entry{name: name, mode: cpio.TypeDir | 0o755})
			return nil
		}
		b, err := rootfs.ReadFile(p)
		if err != nil {
			return err
		}
		mode := cpio.FileMode(0o644)
		if bytes.HasPrefix(b, []byte("#!")) {
			mode = 0o755
		}
		entries = append(entries, entry{name: name, mode: cpio.TypeReg | mode, data: b})
		return nil
	})
	if walkErr != nil {
		return nil, fmt.Errorf("building guest image: reading rootfs: %w", walkErr)
	}
	bb, err := os.ReadFile(opts.Busybox)
	if err != nil {
		return nil, fmt.Errorf("building guest image: reading busybox (apt-get install busybox-static): %w", err)
	}
	entries = append(entries, entry{name: "bin/busybox", mode: cpio.TypeReg | 0o755, data: bb})
	entries = append(entries, entry{name: "lib/modules", mode: cpio.TypeDir | 0o755})
	modDir := filepath.Join(kdir, "lib", "modules", release, "kernel")
	found := map[string]string{}
	filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			found[strings.TrimSuffix(d.Name(), ".ko")] = p
		}
		return nil
	})
	for _, m := range Modules {
		p, ok := found[m]
		if !ok {
			return nil, fmt.Errorf("building guest image: module %q not in kernel %s", m, release)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("building guest image: %w", err)
		}
		entries = append(entries, entry{name: "lib/modules/" + m + ".ko", mode: cpio.TypeReg | 0o644, data: b})
	}
	if opts.SourceDir != "" {
		if srcs, _ := filepath.Glob(filepath.Join(opts.SourceDir, "cmd", "guestlink-agent", "*.go")); len(srcs) > 0 {
			agent := filepath.Join(opts.OutDir, AgentFile)
			logf("building the static agent")
			cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", agent, "./cmd/guestlink-agent")
			cmd.Dir = opts.SourceDir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building guest image: building agent: %w: %s", err, out)
			}
			b, err := os.ReadFile(agent)
			if err != nil {
				return nil, fmt.Errorf("building guest image: %w", err)
			}
			entries = append(entries, entry{name: "sbin/guestlink-agent", mode: cpio.TypeReg | 0o755, data: b})
			img.HasAgent, img.AgentPath = true, agent
			// devlxdget lets /init show what guest software reads from
			// /dev/lxd/sock (kernel parameter guestlink.get=PATH).
			tool := filepath.Join(opts.OutDir, DevlxdGetFile)
			cmd = exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", tool, "./plugins/shared/guestimage/devlxdget")
			cmd.Dir = opts.SourceDir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building guest image: building devlxdget: %w: %s", err, out)
			}
			if b, err = os.ReadFile(tool); err != nil {
				return nil, fmt.Errorf("building guest image: %w", err)
			}
			entries = append(entries, entry{name: "sbin/devlxdget", mode: cpio.TypeReg | 0o755, data: b})
		} else {
			logf("no cmd/guestlink-agent in %s: the image has no agent", opts.SourceDir)
			os.Remove(filepath.Join(opts.OutDir, AgentFile)) // HasAgent is read from its presence
		}
	}
	for _, d := range []string{"bin", "sbin", "etc", "proc", "sys", "dev", "run", "root", "var", "var/run", "var/log"} {
		entries = append(entries, entry{name: d, mode: cpio.TypeDir | 0o755})
	}
	entries = append(entries,
		entry{name: "dev/console", mode: cpio.TypeChar | 0o600, rdev: [2]int{5, 1}},
		entry{name: "dev/null", mode: cpio.TypeChar | 0o666, rdev: [2]int{1, 3}},
		entry{name: "tmp", mode: cpio.TypeDir | 0o1777},
	)

	sum := digest(entries)
	sumFile := img.Initrd + ".sha256"
	if old, err := os.ReadFile(sumFile); err == nil && string(old) == sum {
		if _, err := os.Stat(img.Initrd); err == nil {
			logf("initramfs up to date (%s)", img.Initrd)
			return img, nil
		}
	}
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err := writeArchive(gz, entries); err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	if err := writeFileAtomic(img.Initrd, buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	if err := os.WriteFile(sumFile, []byte(sum), 0o644); err != nil {
		return nil, fmt.Errorf("building guest image: %w", err)
	}
	img.Rebuilt = true
	logf("wrote %s (%d KiB), kernel %s", img.Initrd, buf.Len()/1024, release)
	return img, nil
}

func copyIfChanged(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		return nil
	}
	return writeFileAtomic(dst, b, 0o644)
}

func writeFileAtomic(p string, b []byte, mode os.FileMode) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// olderThan reports whether t is older than the modification time of path.
func olderThan(t time.Time, path string) bool {
	st, err := os.Stat(path)
	return err != nil || t.Before(st.ModTime())
}
