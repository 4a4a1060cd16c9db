// Package guestimage builds the small bootable guest the QEMU backends boot:
// Debian's cloud kernel unpacked from its package (never installed), an
// initramfs with busybox-static, the virtio modules, the static guestlink
// agent and an /init that prepares the guest without udev. It also writes
// the config-drive archive the backends append to the initramfs at each
// start.
package guestimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
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
	"virtio_pci", "virtio_console", "button", "evdev",
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

// kernelTree returns the directory the kernel package is unpacked in and the
// kernel release, downloading and unpacking the package when needed.
func kernelTree(ctx context.Context, opts Options, logf func(string, ...any)) (string, string, error) {
	deb := opts.KernelDeb
	if deb == "" {
		pkg, err := versionedKernelPackage(ctx, opts.KernelPackage)
		if err != nil {
			return "", "", err
		}
		debDir := filepath.Join(opts.OutDir, "deb")
		if err := os.MkdirAll(debDir, 0o755); err != nil {
			return "", "", err
		}
		matches, _ := filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
		if len(matches) == 0 {
			logf("apt-get download %s", pkg)
			cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
			cmd.Dir = debDir
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", "", fmt.Errorf("downloading %s: %w: %s", pkg, err, out)
			}
			matches, _ = filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
			if len(matches) == 0 {
				return "", "", fmt.Errorf("downloading %s: no .deb appeared in %s", pkg, debDir)
			}
		}
		sort.Strings(matches)
		deb = matches[len(matches)-1]
	}
	kdir := filepath.Join(opts.OutDir, "kernel", strings.TrimSuffix(filepath.Base(deb), ".deb"))
	if _, err := os.Stat(filepath.Join(kdir, ".unpacked")); err != nil {
		logf("dpkg-deb -x %s", filepath.Base(deb))
		os.RemoveAll(kdir)
		if err := os.MkdirAll(kdir, 0o755); err != nil {
			return "", "", err
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, kdir).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("unpacking %s: %w: %s", deb, err, out)
		}
		if err := os.WriteFile(filepath.Join(kdir, ".unpacked"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(kdir, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return "", "", fmt.Errorf("kernel package %s: want one boot/vmlinuz-*, found %d", deb, len(kernels))
	}
	return kdir, strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-"), nil
}

// versionedKernelPackage returns the linux-image-<release> package meta
// depends on.
func versionedKernelPackage(ctx context.Context, meta string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", meta).Output()
	if err != nil {
		return "", fmt.Errorf("resolving kernel package %q: apt-cache depends: %w", meta, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if dep, ok := strings.CutPrefix(line, "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSpace(dep), nil
		}
	}
	return "", fmt.Errorf("resolving kernel package %q: no linux-image-* dependency in %q", meta, out)
}

// entry is one member of a cpio archive.
type entry struct {
	name string
	mode cpio.FileMode
	data []byte
	rdev [2]int // major, minor for device nodes
}

// writeArchive writes entries as a newc archive, parents before children.
// cavaliergopher/cpio does not write the rdev fields device nodes need, so
// the "dev" directory and its device nodes are written first by hand (each
// newc member ends 4-byte aligned), the rest through cpio.Writer.
func writeArchive(w io.Writer, entries []entry) error {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.name] = true
	}
	for _, e := range entries {
		for d := path.Dir(e.name); d != "." && d != "/"; d = path.Dir(d) {
			if !have[d] {
				have[d] = true
				entries = append(entries, entry{name: d, mode: cpio.TypeDir | 0o755})
			}
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	seen := map[string]bool{}
	var devs, rest []entry
	for _, e := range entries {
		if seen[e.name] {
			continue
		}
		seen[e.name] = true
		if e.mode&^0o7777 == cpio.TypeChar || (e.name == "dev" && hasDevices(entries)) {
			devs = append(devs, e)
		} else {
			rest = append(rest, e)
		}
	}
	for _, e := range devs {
		if err := writeNewcHeader(w, e); err != nil {
			return fmt.Errorf("writing %s to cpio: %w", e.name, err)
		}
	}
	cw := cpio.NewWriter(w)
	for _, e := range rest {
		h := &cpio.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Links: 1}
		if e.mode&^0o7777 == cpio.TypeDir {
			h.Links = 2
		}
		if err := cw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s to cpio: %w", e.name, err)
		}
		if len(e.data) > 0 {
			if _, err := cw.Write(e.data); err != nil {
				return fmt.Errorf("writing %s to cpio: %w", e.name, err)
			}
		}
	}
	return cw.Close()
}

func hasDevices(entries []entry) bool {
	for _, e := range entries {
		if e.mode&^0o7777 == cpio.TypeChar {
			return true
		}
	}
	return false
}

// writeNewcHeader writes a data-less newc member (a directory or a device
// node with its rdev major and minor).
func writeNewcHeader(w io.Writer, e entry) error {
	links := 1
	if e.mode&^0o7777 == cpio.TypeDir {
		links = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		0, uint32(e.mode), 0, 0, links, 0, 0, 0, 0, e.rdev[0], e.rdev[1], len(e.name)+1, 0)
	b := append([]byte(hdr), e.name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	_, err := w.Write(b)
	return err
}

// layoutVersion is mixed into the initramfs digest; bump it when the way
// entries are written changes, so cached images are rebuilt.
const layoutVersion = "guestimage/2"

func digest(entries []entry) string {
	es := append([]entry(nil), entries...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].name < es[j].name })
	h := sha256.New()
	io.WriteString(h, layoutVersion)
	for _, e := range es {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00%v\x00", e.name, e.mode, len(e.data), e.rdev)
		h.Write(e.data)
	}
	return hex.EncodeToString(h.Sum(nil))
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

// extractVmlinux writes the ELF kernel inside the bzImage at vmlinuz to out.
// It reads the compressed payload's place from the x86 boot header
// (payload_offset, payload_length) and supports the LZ4 payload of
// Debian's kernels through the lz4 command.
func extractVmlinux(ctx context.Context, vmlinuz, out string) error {
	d, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	if len(d) < 0x250 || string(d[0x202:0x206]) != "HdrS" {
		return errors.New("not an x86 bzImage")
	}
	setupSects := int(d[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(d[0x248:]))
	n := int(binary.LittleEndian.Uint32(d[0x24c:]))
	if n < 8 || start+n > len(d) {
		return errors.New("bad payload offset or length in the boot header")
	}
	payload := d[start : start+n]
	if !bytes.HasPrefix(payload, []byte{0x02, 0x21, 0x4c, 0x18}) {
		return fmt.Errorf("payload is not LZ4 (magic % x)", payload[:4])
	}
	size := binary.LittleEndian.Uint32(payload[n-4:]) // the kernel appends the decompressed size
	cmd := exec.CommandContext(ctx, "lz4", "-dc")
	cmd.Stdin = bytes.NewReader(payload[:n-4])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	elf, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("lz4 -dc (apt-get install lz4): %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if uint32(len(elf)) != size || !bytes.HasPrefix(elf, []byte("\x7fELF")) {
		return fmt.Errorf("decompressed kernel is %d bytes, want an ELF of %d", len(elf), size)
	}
	return writeFileAtomic(out, elf, 0o644)
}

// ConfigFile is one file of a config drive.
type ConfigFile struct {
	Path string // relative, slash separated
	Mode uint32 // permission bits
	Data []byte
}

// ConfigDir is where the config drive's files appear in the guest before
// /init copies them to the agent's config directory.
const ConfigDir = "config"

// WriteConfigArchive writes files as an uncompressed newc cpio archive whose
// members live under /config. Appended to an initramfs (at a 4-byte
// boundary), the kernel unpacks it over the base archive. Paths must be
// relative and stay inside the drive.
func WriteConfigArchive(w io.Writer, files []ConfigFile) error {
	entries := []entry{{name: ConfigDir, mode: cpio.TypeDir | 0o700}}
	dirs := map[string]bool{}
	for _, f := range files {
		clean := path.Clean(f.Path)
		if f.Path == "" || path.IsAbs(f.Path) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(f.Path, "\x00") {
			return fmt.Errorf("config file %q: path must be relative and inside the drive", f.Path)
		}
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("config file %q: mode %o is not permission bits", f.Path, f.Mode)
		}
		for d := path.Dir(clean); d != "."; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, entry{name: ConfigDir + "/" + d, mode: cpio.TypeDir | 0o700})
			}
		}
		entries = append(entries, entry{name: ConfigDir + "/" + clean, mode: cpio.TypeReg | cpio.FileMode(f.Mode), data: f.Data})
	}
	return writeArchive(w, entries)
}
