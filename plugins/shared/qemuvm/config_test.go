package qemuvm

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	initrd := filepath.Join(dir, "initrd.img")
	os.WriteFile(kernel, []byte("k"), 0o644)
	os.WriteFile(initrd, []byte("i"), 0o644)
	tests := []struct {
		name    string
		cfg     map[string]string
		def     Defaults
		want    *Config
		wantErr string // substring; "" means success
	}{
		{"minimal", map[string]string{KeyKernel: kernel}, Defaults{},
			&Config{Kernel: kernel, MemoryMiB: 256, CPUs: 1, Accel: AccelAuto}, ""},
		{"all keys", map[string]string{KeyKernel: kernel, KeyInitrd: initrd, KeyAppend: "quiet", KeyMemory: "1GiB", KeyCPUs: "2", KeyAccel: "tcg", KeyLink: "serial", "user.x": "ignored"}, Defaults{},
			&Config{Kernel: kernel, Initrd: initrd, Append: "quiet", MemoryMiB: 1024, CPUs: 2, Accel: AccelTCG, Link: sdk.LinkSerial}, ""},
		{"defaults", map[string]string{}, Defaults{Kernel: kernel, Initrd: initrd},
			&Config{Kernel: kernel, Initrd: initrd, MemoryMiB: 256, CPUs: 1, Accel: AccelAuto}, ""},
		{"explicit kernel drops default initrd", map[string]string{KeyKernel: kernel}, Defaults{Kernel: kernel, Initrd: initrd},
			&Config{Kernel: kernel, MemoryMiB: 256, CPUs: 1, Accel: AccelAuto}, ""},
		{"memory plain MiB", map[string]string{KeyKernel: kernel, KeyMemory: "512"}, Defaults{},
			&Config{Kernel: kernel, MemoryMiB: 512, CPUs: 1, Accel: AccelAuto}, ""},
		{"limits.memory when qemu.memory is unset", map[string]string{KeyKernel: kernel, KeyLimitsMemory: "1GiB"}, Defaults{},
			&Config{Kernel: kernel, MemoryMiB: 1024, CPUs: 1, Accel: AccelAuto}, ""},
		{"limits.memory in bytes, rounded up to MiB", map[string]string{KeyKernel: kernel, KeyLimitsMemory: "1000000000"}, Defaults{},
			&Config{Kernel: kernel, MemoryMiB: 954, CPUs: 1, Accel: AccelAuto}, ""},
		{"qemu.memory beats limits.memory", map[string]string{KeyKernel: kernel, KeyMemory: "512", KeyLimitsMemory: "2GiB"}, Defaults{},
			&Config{Kernel: kernel, MemoryMiB: 512, CPUs: 1, Accel: AccelAuto}, ""},
		{"limits.memory percentage", map[string]string{KeyKernel: kernel, KeyLimitsMemory: "50%"}, Defaults{}, nil, "a percentage cannot size a QEMU guest"},
		{"limits.memory too small", map[string]string{KeyKernel: kernel, KeyLimitsMemory: "1MiB"}, Defaults{}, nil, "outside 64 MiB"},
		{"limits.memory unit", map[string]string{KeyKernel: kernel, KeyLimitsMemory: "1XB"}, Defaults{}, nil, `unknown unit "XB"`},
		{"missing kernel", map[string]string{}, Defaults{}, nil, "qemu.kernel is not set"},
		{"kernel not found", map[string]string{KeyKernel: filepath.Join(dir, "nope")}, Defaults{}, nil, "no such file"},
		{"kernel relative", map[string]string{KeyKernel: "vmlinuz"}, Defaults{}, nil, "absolute path"},
		{"kernel is a dir", map[string]string{KeyKernel: dir}, Defaults{}, nil, "not a regular file"},
		{"initrd not found", map[string]string{KeyKernel: kernel, KeyInitrd: filepath.Join(dir, "x")}, Defaults{}, nil, "qemu.initrd"},
		{"unknown key", map[string]string{KeyKernel: kernel, "qemu.bogus": "1"}, Defaults{}, nil, `unknown config key "qemu.bogus"`},
		{"bad memory", map[string]string{KeyKernel: kernel, KeyMemory: "lots"}, Defaults{}, nil, "qemu.memory"},
		{"memory unit", map[string]string{KeyKernel: kernel, KeyMemory: "12KB"}, Defaults{}, nil, "unknown unit"},
		{"memory too small", map[string]string{KeyKernel: kernel, KeyMemory: "16MiB"}, Defaults{}, nil, "outside"},
		{"bad cpus", map[string]string{KeyKernel: kernel, KeyCPUs: "0"}, Defaults{}, nil, "qemu.cpus"},
		{"bad accel", map[string]string{KeyKernel: kernel, KeyAccel: "hvf"}, Defaults{}, nil, "qemu.accel"},
		{"bad link", map[string]string{KeyKernel: kernel, KeyLink: "hybrid"}, Defaults{}, nil, "qemu.link"},
		{"newline in append", map[string]string{KeyKernel: kernel, KeyAppend: "a\nb"}, Defaults{}, nil, "qemu.append"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.cfg, tt.def)
			if tt.wantErr != "" {
				if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseConfig error = %v, want ErrInvalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Fatalf("ParseConfig (-want +got):\n%s", d)
			}
		})
	}
}

func TestCommandLineGolden(t *testing.T) {
	cfg := &Config{Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", MemoryMiB: 256, CPUs: 1, Append: "guestlink.debug=1"}
	tests := []struct {
		name string
		l    launch
	}{
		{"current-serial-tcg", launch{Layout: LayoutCurrent, Link: sdk.LinkSerial, Accel: AccelTCG}},
		{"legacy-serial-tcg", launch{Layout: LayoutLegacy, Link: sdk.LinkSerial, Accel: AccelTCG}},
		{"current-vsock-kvm", launch{Layout: LayoutCurrent, Link: sdk.LinkVsock, Accel: AccelKVM, CID: 42}},
		{"current-serial-restore", launch{Layout: LayoutCurrent, Link: sdk.LinkSerial, Accel: AccelTCG, Restore: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.l
			l.Name, l.UUID, l.Dir, l.Config = "web,1", "8d5b1b7e-0000-4000-8000-000000000001", "/guests/8d5b1b7e-0000-4000-8000-000000000001", cfg
			l.Initrd = l.Dir + "/" + bootInitrd
			got := strings.Join(l.args(), "\n") + "\n"
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (go test -update writes it): %v", err)
			}
			if d := cmp.Diff(string(want), got); d != "" {
				t.Fatalf("command line (-golden +got):\n%s", d)
			}
		})
	}
}

func TestLayoutPorts(t *testing.T) {
	tests := []struct {
		l         Layout
		wired     string
		hasLegacy bool
		hasCurr   bool
	}{
		{LayoutCurrent, ringproto.PortCurrent, true, true},
		{LayoutLegacy, ringproto.PortLegacy, true, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.l), func(t *testing.T) {
			var wired []string
			names := map[string]bool{}
			for _, p := range tt.l.ports(false) {
				names[p.name] = true
				if p.chardev == RingChardev {
					wired = append(wired, p.name)
				}
			}
			if len(wired) != 1 || wired[0] != tt.wired {
				t.Errorf("wired ports = %v, want [%s]", wired, tt.wired)
			}
			if names[ringproto.PortLegacy] != tt.hasLegacy || names[ringproto.PortCurrent] != tt.hasCurr {
				t.Errorf("ports = %v", names)
			}
		})
	}
}

func TestDecodeHandle(t *testing.T) {
	const u = "0b5c8f0e-3d2a-4f1b-9c6d-7e8f9a0b1c2d"
	good := handle{Version: 1, UUID: u, Name: "g", Dir: "/x/" + u, Layout: LayoutCurrent}
	tests := []struct {
		name string
		mod  func(h *handle)
		raw  string
		ok   bool
	}{
		{"good", func(*handle) {}, "", true},
		{"empty", nil, "", false},
		{"garbage", nil, "\x00{", false},
		{"version", func(h *handle) { h.Version = 2 }, "", false},
		{"uuid with slash", func(h *handle) { h.UUID = "../x" }, "", false},
		{"dir not the uuid", func(h *handle) { h.Dir = "/etc" }, "", false},
		{"relative dir", func(h *handle) { h.Dir = u }, "", false},
		{"uuid an option", func(h *handle) { h.UUID, h.Dir = "-c", "/x/-c" }, "", false},
		{"uuid not canonical", func(h *handle) { h.UUID, h.Dir = "abc-1", "/x/abc-1" }, "", false},
		{"uuid upper case", func(h *handle) { h.UUID = strings.ToUpper(u); h.Dir = "/x/" + h.UUID }, "", false},
		{"dir with quote", func(h *handle) { h.Dir = "/x'y/abc-1" }, "", false},
		{"layout", func(h *handle) { h.Layout = "new" }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw sdk.Handle
			if tt.mod != nil {
				h := good
				tt.mod(&h)
				raw = h.encode()
			} else {
				raw = sdk.Handle(tt.raw)
			}
			_, err := decodeHandle(raw)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, sdk.ErrInvalid)) {
				t.Fatalf("decodeHandle = %v, want ok=%v (ErrInvalid otherwise)", err, tt.ok)
			}
		})
	}
}

func TestAccel(t *testing.T) {
	dir := t.TempDir()
	withVMX := filepath.Join(dir, "vmx")
	without := filepath.Join(dir, "none")
	os.WriteFile(withVMX, []byte("processor\t: 0\nflags\t\t: fpu vme vmx sse\n"), 0o644)
	os.WriteFile(without, []byte("processor\t: 0\nflags\t\t: fpu vme sse hypervisor\n"), 0o644)
	if !cpuHasVirt(withVMX) || cpuHasVirt(without) || cpuHasVirt(filepath.Join(dir, "missing")) {
		t.Fatal("cpuHasVirt misreads cpuinfo")
	}
	tests := []struct {
		configured string
		kvm        bool
		want       string
	}{
		{AccelAuto, true, AccelKVM},
		{AccelAuto, false, AccelTCG},
		{AccelKVM, false, AccelKVM}, // forced by the user
		{AccelTCG, true, AccelTCG},
	}
	for _, tt := range tests {
		if got := resolveAccel(tt.configured, HostCaps{KVM: tt.kvm}); got != tt.want {
			t.Errorf("resolveAccel(%q, kvm=%v) = %q, want %q", tt.configured, tt.kvm, got, tt.want)
		}
	}
}

// TestStartFailureShowsQEMUError starts QEMU with a kernel it cannot load:
// Start must fail promptly with QEMU's own words, and leave nothing running.
func TestStartFailureShowsQEMUError(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.Requires(t, "qemu-system-x86_64", "not installed (scripts/install-deps.sh installs qemu-system-x86)")
	}
	dir := shortTempDir(t)
	kernel := filepath.Join(dir, "not-a-kernel")
	os.WriteFile(kernel, []byte("this is not a kernel"), 0o644)
	b, err := New(Options{Name: "qemu-test", Layout: LayoutCurrent, Dir: filepath.Join(dir, "g"), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	spec := &sdk.GuestSpec{Name: "bad", UUID: newUUID(), Config: map[string]string{KeyKernel: kernel, KeyAccel: AccelTCG}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.Start(ctx, h, spec)
	if err == nil {
		b.Stop(ctx, h, sdk.StopOptions{Force: true})
		t.Fatal("Start with a bogus kernel succeeded")
	}
	if !strings.Contains(err.Error(), "QEMU said:") || !strings.Contains(err.Error(), "kernel") {
		t.Fatalf("Start error = %v, want QEMU's stderr tail", err)
	}
	st, err := b.State(ctx, h)
	if err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("State after a failed start = %+v, %v", st, err)
	}
}

func TestColdDiskArgs(t *testing.T) {
	devs := map[string]sdk.Device{
		"b":    {"type": "disk", "pool": "default", "source": "v2", sdk.KeyVolumePath: "/p/v2,x.raw", "readonly": "true"},
		"a":    {"type": "disk", "pool": "default", "source": "v1", sdk.KeyVolumePath: "/p/v1.raw"},
		"root": {"type": "disk", "pool": "default", "path": "/"},
		"eth0": {"type": "nic"},
	}
	got := strings.Join(coldDiskArgs(coldDisks(devs)), " ")
	want := "-blockdev driver=raw,node-name=gl-a,read-only=off,file.driver=file,file.filename=/p/v1.raw,file.read-only=off " +
		"-device virtio-blk-pci,id=gl-a,drive=gl-a,bus=glhp0,serial=a " +
		"-blockdev driver=raw,node-name=gl-b,read-only=on,file.driver=file,file.filename=/p/v2,,x.raw,file.read-only=on " +
		"-device virtio-blk-pci,id=gl-b,drive=gl-b,bus=glhp1,serial=b"
	if got != want {
		t.Fatalf("cold disks:\n got %s\nwant %s", got, want)
	}
}
