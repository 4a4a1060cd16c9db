package qemuvm

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// ConfigPrefix is the prefix of the instance config keys the QEMU backends own.
const ConfigPrefix = "qemu."

// Config keys.
const (
	KeyKernel = "qemu.kernel" // path of the guest kernel (required unless the plugin has a default)
	KeyInitrd = "qemu.initrd" // path of the guest initramfs
	KeyAppend = "qemu.append" // extra kernel command line
	KeyMemory = "qemu.memory" // guest memory: "256", "256MiB", "512M", "1GiB"
	// KeyLimitsMemory is the instance's LXD key; the guest's memory when
	// qemu.memory is not set (the daemon sets it to an image's minimum).
	KeyLimitsMemory = "limits.memory"
	KeyCPUs         = "qemu.cpus"  // number of vCPUs
	KeyAccel        = "qemu.accel" // auto, kvm or tcg
	KeyLink         = "qemu.link"  // auto, serial or vsock
)

// Keys lists every config key the QEMU backends accept.
var Keys = []string{KeyKernel, KeyInitrd, KeyAppend, KeyMemory, KeyCPUs, KeyAccel, KeyLink}

// Accelerations.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Config is a guest's validated QEMU configuration.
type Config struct {
	Kernel    string
	Initrd    string
	Append    string
	MemoryMiB int
	CPUs      int
	Accel     string       // auto, kvm or tcg as configured
	Link      sdk.LinkKind // "" means auto
}

// Defaults are plugin-wide defaults, e.g. from the plugin's environment.
type Defaults struct {
	Kernel string // used when qemu.kernel is unset
	Initrd string // used when qemu.kernel and qemu.initrd are unset
}

// ParseConfig validates the qemu.* keys of cfg; other keys are ignored.
// Every error wraps sdk.ErrInvalid and names the key.
func ParseConfig(cfg map[string]string, def Defaults) (*Config, error) {
	for k := range cfg {
		if strings.HasPrefix(k, ConfigPrefix) && !slices.Contains(Keys, k) {
			return nil, fmt.Errorf("%w: unknown config key %q (known: %s)", sdk.ErrInvalid, k, strings.Join(Keys, ", "))
		}
	}
	c := &Config{MemoryMiB: 256, CPUs: 1, Accel: AccelAuto, Kernel: cfg[KeyKernel], Initrd: cfg[KeyInitrd], Append: cfg[KeyAppend]}
	if _, set := cfg[KeyKernel]; !set {
		c.Kernel = def.Kernel
		if _, set := cfg[KeyInitrd]; !set {
			c.Initrd = def.Initrd
		}
	}
	if c.Kernel == "" {
		return nil, fmt.Errorf("%w: %s is not set: QEMU guests boot a kernel given by path (make guest-image builds one in bin/guest/vmlinuz)", sdk.ErrInvalid, KeyKernel)
	}
	for _, f := range []struct{ key, path string }{{KeyKernel, c.Kernel}, {KeyInitrd, c.Initrd}} {
		if f.path == "" {
			continue
		}
		if !strings.HasPrefix(f.path, "/") {
			return nil, fmt.Errorf("%w: %s %q: want an absolute path", sdk.ErrInvalid, f.key, f.path)
		}
		st, err := os.Stat(f.path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", sdk.ErrInvalid, f.key, f.path, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %s %q: not a regular file", sdk.ErrInvalid, f.key, f.path)
		}
	}
	if strings.ContainsAny(c.Append, "\x00\n") {
		return nil, fmt.Errorf("%w: %s: control characters in the kernel command line", sdk.ErrInvalid, KeyAppend)
	}
	if v, ok := cfg[KeyMemory]; ok {
		mib, err := parseMiB(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", sdk.ErrInvalid, KeyMemory, v, err)
		}
		c.MemoryMiB = mib
	} else if v, ok := cfg[KeyLimitsMemory]; ok {
		mib, err := limitsMiB(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", sdk.ErrInvalid, KeyLimitsMemory, v, err)
		}
		c.MemoryMiB = mib
	}
	if v, ok := cfg[KeyCPUs]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("%w: %s %q: want a whole number from 1 to 64", sdk.ErrInvalid, KeyCPUs, v)
		}
		c.CPUs = n
	}
	if v, ok := cfg[KeyAccel]; ok {
		switch v {
		case AccelAuto, AccelKVM, AccelTCG:
			c.Accel = v
		default:
			return nil, fmt.Errorf("%w: %s %q: want auto, kvm or tcg", sdk.ErrInvalid, KeyAccel, v)
		}
	}
	if v, ok := cfg[KeyLink]; ok {
		switch v {
		case "auto", "":
		case string(sdk.LinkSerial), string(sdk.LinkVsock):
			c.Link = sdk.LinkKind(v)
		default:
			return nil, fmt.Errorf("%w: %s %q: want auto, serial or vsock", sdk.ErrInvalid, KeyLink, v)
		}
	}
	return c, nil
}

// parseMiB parses a memory size in MiB: a bare number is MiB; suffixes M,
// MiB, MB, G, GiB, GB (binary units) are accepted.
// limitsMiB reads the instance key limits.memory (LXD's: bytes, or a size
// with a decimal or binary unit) as whole MiB, rounded up, within what
// parseMiB allows. A percentage of the host's memory is refused: a guest's
// memory is fixed at boot, and the host's changes.
func limitsMiB(s string) (int, error) {
	if strings.HasSuffix(s, "%") {
		return 0, fmt.Errorf("a percentage cannot size a QEMU guest: give a size such as 1GiB (or set %s)", KeyMemory)
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("want a size such as 1GiB")
	}
	mul, ok := map[string]uint64{"": 1, "B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[strings.TrimPrefix(s, num)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", strings.TrimPrefix(s, num))
	}
	if n > (1<<62)/mul {
		return 0, fmt.Errorf("too large")
	}
	mib := (n*mul + 1<<20 - 1) >> 20
	if mib < 64 || mib > 64*1024 {
		return 0, fmt.Errorf("%d MiB is outside 64 MiB..64 GiB", mib)
	}
	return int(mib), nil
}

func parseMiB(s string) (int, error) {
	num := strings.TrimRight(s, "KMGiBkmgb")
	unit := strings.ToUpper(strings.TrimPrefix(s, num))
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a size such as 256MiB or 1GiB")
	}
	switch unit {
	case "", "M", "MB", "MIB":
	case "G", "GB", "GIB":
		n *= 1024
	default:
		return 0, fmt.Errorf("unknown unit %q (want MiB or GiB)", unit)
	}
	if n < 64 || n > 64*1024 {
		return 0, fmt.Errorf("%d MiB is outside 64 MiB..64 GiB", n)
	}
	return n, nil
}
