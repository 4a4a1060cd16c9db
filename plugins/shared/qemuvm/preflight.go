package qemuvm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// What the QEMU backends need from the host, checked at every Info (the
// daemon's health ping and its check before a guest is created or started):
// the programs they run, looked up in the plugin's PATH as they are run, and
// the firmware QEMU loads for the machine cmdline.go builds, looked up in
// QEMU's own search path. Each comes with the Debian package providing it
// (docs/qemu.md, "What the host needs").

// program is a program the backends run, with its Debian package.
type program struct {
	name *string // the variable holding its name (tests change them)
	pkg  string
}

// programs are the helpers beside QEMU itself: qemu-img makes a guest's
// overlay on its image (disk.go), genisoimage its config drive
// (configdrive.go).
var programs = []program{
	{&imgBinary, "qemu-utils"},
	{&isoBinary, "genisoimage"},
}

// qemuPackage provides qemu-system-x86_64.
const qemuPackage = "qemu-system-x86"

// firmwareFile is a file QEMU loads from its search path for our machine.
type firmwareFile struct {
	name, pkg string
}

// firmware are the files a q35 machine booting a kernel directly with a
// virtio NIC loads (seen with strace; QEMU refuses to start without the
// BIOS and the NIC's option ROM).
var firmware = []firmwareFile{
	{"bios-256k.bin", "seabios"},              // the machine's BIOS
	{"linuxboot_dma.bin", "qemu-system-data"}, // -kernel direct boot
	{"kvmvapic.bin", "qemu-system-data"},      // the x86 APIC's option ROM
	{"efi-virtio.rom", "ipxe-qemu"},           // virtio-net-pci's option ROM (nic devices)
}

// searchPathTimeout bounds "qemu-system-x86_64 -L help".
const searchPathTimeout = 10 * time.Second

// firmwareDirs is QEMU's firmware search path for one build of QEMU.
type firmwareDirs struct {
	bin  string    // the resolved binary
	mod  time.Time // its modification time and size when asked
	size int64
	dirs []string
}

// missing returns what the host lacks for running guests, nil when
// nothing. It stats a few files; QEMU's search path is asked once per QEMU
// binary (path, size and time).
func (b *Backend) missing() []sdk.Missing {
	var out []sdk.Missing
	qemu, err := exec.LookPath(b.opts.Binary)
	if err != nil {
		out = append(out, sdk.Missing{What: b.opts.Binary, Reason: lookReason(b.opts.Binary, err), Package: qemuPackage})
	}
	for _, p := range programs {
		if _, err := exec.LookPath(*p.name); err != nil {
			out = append(out, sdk.Missing{What: *p.name, Reason: lookReason(*p.name, err), Package: p.pkg})
		}
	}
	if qemu != "" {
		dirs := b.searchPath(qemu)
		for _, f := range firmware {
			if !inDirs(dirs, f.name) {
				out = append(out, sdk.Missing{What: "firmware " + f.name, Reason: "not in QEMU's firmware search path (" + filepath.Base(qemu) + " -L help)", Package: f.pkg})
			}
		}
	}
	for _, d := range []struct{ env, path string }{{EnvKernel, b.opts.Defaults.Kernel}, {EnvInitrd, b.opts.Defaults.Initrd}} {
		if d.path == "" {
			continue
		}
		if st, err := os.Stat(d.path); err != nil || !st.Mode().IsRegular() {
			out = append(out, sdk.Missing{What: "the default guest file " + d.env + " names", Reason: "is not a file (make guest-image builds bin/guest/vmlinuz and initrd.img)"})
		}
	}
	return out
}

// lookReason says why exec.LookPath did not find name.
func lookReason(name string, err error) string {
	switch {
	case !strings.Contains(name, "/") && errors.Is(err, exec.ErrNotFound):
		return "not found in PATH"
	case errors.Is(err, os.ErrNotExist):
		return "does not exist"
	case errors.Is(err, os.ErrPermission):
		return "is not executable"
	}
	return "cannot be run"
}

// inDirs reports whether a regular file name is in one of dirs.
func inDirs(dirs []string, name string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// searchPath returns QEMU's firmware search path: what "qemu -L help"
// prints, remembered per binary; if that fails, the data directory beside
// the binary (../share/qemu), QEMU's built-in default.
func (b *Backend) searchPath(qemu string) []string {
	st, err := os.Stat(qemu)
	if err != nil {
		return nil
	}
	b.fwMu.Lock()
	defer b.fwMu.Unlock()
	if c := b.fw; c != nil && c.bin == qemu && c.mod.Equal(st.ModTime()) && c.size == st.Size() {
		return c.dirs
	}
	c := &firmwareDirs{bin: qemu, mod: st.ModTime(), size: st.Size()}
	ctx, cancel := context.WithTimeout(context.Background(), searchPathTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-L", "help")
	cmd.Env = VMMEnv()
	out, err := cmd.Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if line = strings.TrimSpace(line); filepath.IsAbs(line) {
				c.dirs = append(c.dirs, line)
			}
		}
	}
	if len(c.dirs) == 0 {
		b.log.Warn("asking QEMU for its firmware search path failed; looking beside the binary", "qemu", qemu, "error", err)
		c.dirs = []string{filepath.Join(filepath.Dir(qemu), "..", "share", "qemu")}
	}
	b.fw = c
	return c.dirs
}
