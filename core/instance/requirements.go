package instance

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
)

// ImagePropMinMemory is the image property naming the least memory a guest
// of the image needs to boot cleanly (a size such as 1GiB): the Debian
// image records it because at 256 MiB the first boot's OOM killer takes
// cloud-init's config stage and the guest never declares Ready.
const ImagePropMinMemory = "requirements.memory"

// memoryUnits are the byte multipliers of limits.memory's units (LXD's).
var memoryUnits = map[string]uint64{
	"": 1, "B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15, "EB": 1e18,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60,
}

// parseBytes reads a size of limits.memory's form ("1073741824", "512MiB",
// "2GB") as bytes.
func parseBytes(v string) (uint64, error) {
	m := memSizeRe.FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size such as 512MiB or 2GiB", v)
	}
	n, err := strconv.ParseUint(m[1], 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a positive size", v)
	}
	mul := memoryUnits[m[2]]
	if n > (1<<63)/mul {
		return 0, fmt.Errorf("%q is too large", v)
	}
	return n * mul, nil
}

// parseBackendMiB reads a backend's memory key (BACKEND.memory, as the QEMU
// backends take it): a plain number is MiB, M/MB/MiB and G/GB/GiB are
// binary units.
func parseBackendMiB(v string) (uint64, error) {
	num := strings.TrimRight(v, "KMGiBkmgb")
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a size such as 256MiB or 1GiB", v)
	}
	switch strings.ToUpper(strings.TrimPrefix(v, num)) {
	case "", "M", "MB", "MIB":
		return n << 20, nil
	case "G", "GB", "GIB":
		return n << 30, nil
	}
	return 0, fmt.Errorf("%q has an unknown unit (want MiB or GiB)", v)
}

// humanBytes prints b in the largest binary unit that divides it.
func humanBytes(b uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.size && b%u.size == 0 {
			return fmt.Sprintf("%d%s", b/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", b)
}

// applyImageRequirements holds a new instance of image ref (its properties
// props) to the image's minimum memory. The instance's memory is its
// backend's memory key (BACKEND.memory) if set, else limits.memory if set as
// a size. Below the minimum, the create is refused naming the key, the
// figure and the fix. With neither set, limits.memory is set to the
// minimum and raised says so (the backend's default may be less). A
// percentage in limits.memory depends on the host, so it is not judged
// here; an unreadable property is ignored (the image's, not the user's).
func applyImageRequirements(cfg map[string]string, backend, ref string, props map[string]string) (raised string, err error) {
	want, ok := props[ImagePropMinMemory]
	if !ok {
		return "", nil
	}
	min, perr := parseBytes(want)
	if perr != nil {
		return "", nil
	}
	key, have := backend+".memory", uint64(0)
	if v, set := cfg[key]; set {
		if have, err = parseBackendMiB(v); err != nil {
			return "", nil // the backend reports its own key's errors
		}
	} else if v, set := cfg[KeyLimitsMemory]; set {
		if strings.HasSuffix(v, "%") {
			return "", nil
		}
		key = KeyLimitsMemory
		if have, err = parseBytes(v); err != nil {
			return "", nil // validateKey has refused it already
		}
	} else {
		cfg[KeyLimitsMemory] = humanBytes(min)
		return fmt.Sprintf("%s=%s: image %q needs at least %s (its %s)", KeyLimitsMemory, humanBytes(min), ref, humanBytes(min), ImagePropMinMemory), nil
	}
	if have < min {
		return "", fmt.Errorf("image %q needs at least %s of memory (its %s), and %s=%s is %s: raise it (-c %s=%s) or leave it unset: %w",
			ref, humanBytes(min), ImagePropMinMemory, key, cfg[key], humanBytes(have), key, humanBytes(min), errdefs.ErrInvalid)
	}
	return "", nil
}

// ImagePropMinDisk is the image property naming the least root disk a
// guest of the image needs (a size such as 2GiB): the images guestlink
// builds record their filesystem's size, which a smaller root disk cannot
// hold.
const ImagePropMinDisk = "requirements.disk"

// rootDevice returns the name of the root disk among devs (type disk,
// path /), "" if there is none.
func rootDevice(devs map[string]map[string]string) string {
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		if d := devs[name]; d["type"] == "disk" && d["path"] == "/" {
			return name
		}
	}
	return ""
}

// applyDiskRequirement holds a new instance of image ref (its properties
// props) to the image's minimum disk, as applyImageRequirements does to
// its memory. eff is the instance's devices over its profiles', own its
// own. A root disk whose size is below the minimum is refused naming both
// sizes and the fix; a root disk without a size (the backend would make
// it the image's size) or no root disk at all gets the minimum as the
// instance's own root device (a copy of the profile's with size set), and
// raised says so. An unreadable property is ignored.
func applyDiskRequirement(eff, own map[string]map[string]string, ref string, props map[string]string) (devs map[string]map[string]string, raised string, err error) {
	want, ok := props[ImagePropMinDisk]
	if !ok {
		return own, "", nil
	}
	min, perr := parseBytes(want)
	if perr != nil {
		return own, "", nil
	}
	name := rootDevice(eff)
	if name != "" && eff[name]["size"] != "" {
		v := eff[name]["size"]
		have, err := storage.ParseSize(v)
		if err != nil {
			return own, "", nil // validateDevice has refused it already
		}
		if uint64(have) < min {
			return own, "", fmt.Errorf("image %q needs a root disk of at least %s (its %s), and device %q size=%s is %s: raise it (size=%s) or leave it unset: %w",
				ref, humanBytes(min), ImagePropMinDisk, name, v, humanBytes(uint64(have)), humanBytes(min), errdefs.ErrInvalid)
		}
		return own, "", nil
	}
	root := map[string]string{"type": "disk", "path": "/"}
	if name == "" {
		name = "root"
	} else {
		root = maps.Clone(eff[name])
	}
	root["size"] = humanBytes(min)
	devs = cloneDevices(own)
	if devs == nil {
		devs = map[string]map[string]string{}
	}
	devs[name] = root
	return devs, fmt.Sprintf("device %q size=%s: image %q needs a root disk of at least %s (its %s)", name, humanBytes(min), ref, humanBytes(min), ImagePropMinDisk), nil
}
