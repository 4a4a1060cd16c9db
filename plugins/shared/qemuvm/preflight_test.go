package qemuvm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// fakeHost is a PATH directory with stand-ins for the programs the
// backends run and a firmware directory with stand-ins for QEMU's files.
// The stand-in qemu-system-x86_64 answers "-L help" with the firmware
// directory, as QEMU does, or fails when searchFails is set.
type fakeHost struct {
	bin, fw string
}

func newFakeHost(t *testing.T, searchFails bool) *fakeHost {
	t.Helper()
	h := &fakeHost{bin: t.TempDir(), fw: t.TempDir()}
	qemu := "#!/bin/sh\n[ \"$1 $2\" = \"-L help\" ] && echo " + h.fw + " && exit 0\nexit 1\n"
	if searchFails {
		qemu = "#!/bin/sh\necho 'qemu: -L help: unknown option' >&2\nexit 1\n"
	}
	writeMode(t, filepath.Join(h.bin, "qemu-system-x86_64"), qemu, 0o755)
	for _, p := range programs {
		writeMode(t, filepath.Join(h.bin, *p.name), "#!/bin/sh\nexit 0\n", 0o755)
	}
	for _, f := range firmware {
		writeMode(t, filepath.Join(h.fw, f.name), "rom", 0o644)
	}
	return h
}

func writeMode(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// preflightInfo returns the Missing of a backend's Info with the plugin's PATH set
// to path.
func preflightInfo(t *testing.T, path string, def Defaults) []sdk.Missing {
	t.Helper()
	t.Setenv("PATH", path)
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: t.TempDir(), Host: &HostCaps{}, Defaults: def})
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Missing
}

// TestPreflight removes one thing at a time from a host that has all the
// QEMU backends need (stand-ins in a PATH of their own) and checks that
// Info names exactly that thing and the Debian package providing it.
func TestPreflight(t *testing.T) {
	for _, tt := range []struct {
		name        string
		searchFails bool                            // the stand-in QEMU does not know -L help
		change      func(t *testing.T, h *fakeHost) // what the host lacks
		def         Defaults
		want        []sdk.Missing
	}{
		{name: "all there", change: func(*testing.T, *fakeHost) {}},
		{name: "no qemu-img", change: func(t *testing.T, h *fakeHost) { rm(t, h.bin, "qemu-img") },
			want: []sdk.Missing{{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"}}},
		{name: "no genisoimage", change: func(t *testing.T, h *fakeHost) { rm(t, h.bin, "genisoimage") },
			want: []sdk.Missing{{What: "genisoimage", Reason: "not found in PATH", Package: "genisoimage"}}},
		{name: "qemu-img not executable", change: func(t *testing.T, h *fakeHost) {
			if err := os.Chmod(filepath.Join(h.bin, "qemu-img"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: []sdk.Missing{{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"}}},
		{name: "no QEMU: its firmware is not looked for", change: func(t *testing.T, h *fakeHost) {
			rm(t, h.bin, "qemu-system-x86_64")
			rm(t, h.fw, "bios-256k.bin")
		}, want: []sdk.Missing{{What: "qemu-system-x86_64", Reason: "not found in PATH", Package: "qemu-system-x86"}}},
		{name: "no BIOS", change: func(t *testing.T, h *fakeHost) { rm(t, h.fw, "bios-256k.bin") },
			want: []sdk.Missing{{What: "firmware bios-256k.bin", Reason: "not in QEMU's firmware search path (qemu-system-x86_64 -L help)", Package: "seabios"}}},
		{name: "no NIC option ROM", change: func(t *testing.T, h *fakeHost) { rm(t, h.fw, "efi-virtio.rom") },
			want: []sdk.Missing{{What: "firmware efi-virtio.rom", Reason: "not in QEMU's firmware search path (qemu-system-x86_64 -L help)", Package: "ipxe-qemu"}}},
		{name: "firmware a directory, not a file", change: func(t *testing.T, h *fakeHost) {
			rm(t, h.fw, "linuxboot_dma.bin")
			if err := os.Mkdir(filepath.Join(h.fw, "linuxboot_dma.bin"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, want: []sdk.Missing{{What: "firmware linuxboot_dma.bin", Reason: "not in QEMU's firmware search path (qemu-system-x86_64 -L help)", Package: "qemu-system-data"}}},
		{name: "-L help fails: the data directory beside the binary is searched", searchFails: true,
			change: func(t *testing.T, h *fakeHost) {
				share := filepath.Join(h.bin, "..", "share", "qemu")
				if err := os.MkdirAll(share, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(filepath.Join(h.bin, "..", "share")) })
				for _, f := range firmware[1:] {
					writeMode(t, filepath.Join(share, f.name), "rom", 0o644)
				}
			}, want: []sdk.Missing{{What: "firmware bios-256k.bin", Reason: "not in QEMU's firmware search path (qemu-system-x86_64 -L help)", Package: "seabios"}}},
		{name: "default kernel gone", change: func(*testing.T, *fakeHost) {}, def: Defaults{Kernel: "/nonexistent/vmlinuz"},
			want: []sdk.Missing{{What: "the default guest file GUESTLINK_QEMU_KERNEL names", Reason: "is not a file (make guest-image builds bin/guest/vmlinuz and initrd.img)"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHost(t, tt.searchFails)
			tt.change(t, h)
			if got := preflightInfo(t, h.bin, tt.def); !slices.Equal(got, tt.want) {
				t.Errorf("Info.Missing =\n %+v, want\n %+v", got, tt.want)
			}
		})
	}
}

func rm(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// TestPreflightFixedWithoutRestart: a backend that lacked qemu-img sees it
// at the next Info once it is installed, and QEMU is asked for its search
// path once for all those Infos (the stand-in counts its runs), then again
// when its binary changed.
func TestPreflightFixedWithoutRestart(t *testing.T) {
	h := newFakeHost(t, false)
	runs := filepath.Join(t.TempDir(), "runs")
	counting := func(extra string) string {
		return "#!/bin/sh\necho run >> " + runs + "\n" + extra + "[ \"$1 $2\" = \"-L help\" ] && echo " + h.fw + " && exit 0\nexit 1\n"
	}
	qemu := filepath.Join(h.bin, "qemu-system-x86_64")
	writeMode(t, qemu, counting(""), 0o755)
	rm(t, h.bin, "qemu-img")
	t.Setenv("PATH", h.bin)
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: t.TempDir(), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := b.Info(context.Background())
	if len(info.Missing) != 1 || info.Missing[0].Package != "qemu-utils" {
		t.Fatalf("Info.Missing = %+v, want qemu-img alone", info.Missing)
	}
	writeMode(t, filepath.Join(h.bin, "qemu-img"), "#!/bin/sh\nexit 0\n", 0o755)
	for range 3 {
		if info, _ := b.Info(context.Background()); len(info.Missing) != 0 {
			t.Fatalf("Info.Missing after installing qemu-img = %+v, want none", info.Missing)
		}
	}
	countRuns := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "run\n")
	}
	if n := countRuns(); n != 1 {
		t.Fatalf("QEMU was asked for its search path %d times over 4 Infos, want once", n)
	}
	writeMode(t, qemu, counting("# upgraded\n"), 0o755) // a new QEMU (another size)
	if info, _ := b.Info(context.Background()); len(info.Missing) != 0 {
		t.Fatalf("Info.Missing after upgrading QEMU = %+v, want none", info.Missing)
	}
	if n := countRuns(); n != 2 {
		t.Fatalf("an upgraded QEMU was asked for its search path %d times in all, want 2", n)
	}
}

// TestPreflightRealQEMU asks this host's QEMU (installed by
// scripts/install-deps.sh) for its search path: with the packages make deps
// installs, nothing is missing, and the search path holds each firmware
// file.
func TestPreflightRealQEMU(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testenv.Requires(t, "qemu-system-x86_64", "not installed (scripts/install-deps.sh installs qemu-system-x86)")
	}
	for _, p := range programs {
		if _, err := exec.LookPath(*p.name); err != nil {
			testenv.Requires(t, *p.name, "not installed (scripts/install-deps.sh installs "+p.pkg+")")
		}
	}
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: t.TempDir(), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	dirs := b.searchPath(qemu)
	for _, f := range firmware {
		if !inDirs(dirs, f.name) {
			t.Errorf("firmware %s (package %s) not in QEMU's search path %q", f.name, f.pkg, dirs)
		}
	}
	info, err := b.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Missing) != 0 {
		t.Errorf("on a host with make deps' packages Info.Missing = %+v", info.Missing)
	}
}
