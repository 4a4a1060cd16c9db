package instance

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/sdk/hostfwd"
)

// CapHotplug is the capability of a backend that adds and removes devices
// of a running guest (plugin contract hotplug.v1).
const CapHotplug = contract.CapHotplug

// VolumeChecker says whether a storage volume exists (core/storage
// implements it).
type VolumeChecker interface {
	// CheckVolume returns nil when the custom volume name exists in pool,
	// or an error wrapping errdefs.ErrNotFound.
	CheckVolume(ctx context.Context, pool, name string) error
}

// Hotplugger is what the manager needs of a backend that announces
// CapHotplug: it changes the devices of a running guest. The plugin host's
// backends implement it.
type Hotplugger interface {
	// UpdateDevices adds (or replaces) the devices in add and removes
	// those in remove on the running guest h.
	UpdateDevices(ctx context.Context, h contract.Handle, add map[string]contract.Device, remove []string) error
}

type deviceConfig struct {
	volumes    VolumeChecker
	allowPaths bool
}

// DeviceUpdate is a change of an instance's devices.
type DeviceUpdate struct {
	// Put adds devices or replaces them whole (name -> config with "type").
	Put map[string]map[string]string
	// Add adds devices that must not exist yet (errdefs.ErrAlreadyExists).
	Add map[string]map[string]string
	// Patch sets keys of existing devices ("" unsets a key); the result is
	// validated whole.
	Patch map[string]map[string]string
	// Remove removes devices by name; each must exist.
	Remove []string
	// Config sets ("" unsets) volatile.<device>.* keys in the same change
	// (e.g. which devlxd identity owns a device).
	Config map[string]string
}

// HwaddrKey is the config key holding a NIC's generated MAC address.
func HwaddrKey(dev string) string { return "volatile." + dev + ".hwaddr" }

// GeneratedHwaddr is the MAC address generated for a NIC without hwaddr:
// LXD's 00:16:3e prefix and three bytes derived from the instance UUID and
// the device name. It is stored in volatile.<dev>.hwaddr when the device
// is created, so it never changes afterwards.
func GeneratedHwaddr(uuid, dev string) string {
	h := sha256.Sum256([]byte(uuid + "\x00" + dev))
	return fmt.Sprintf("00:16:3e:%02x:%02x:%02x", h[0], h[1], h[2])
}

// Device keys by type: LXD's, plus the QEMU backends' size of the root
// disk and hostfwd of a user-mode nic (checked with plugins/sdk/hostfwd,
// the parser the backends use).
var (
	diskKeys = []string{"type", "source", "pool", "path", "readonly", "boot.priority", "size"}
	nicKeys  = []string{"type", "nictype", "network", "parent", "hwaddr", "name", "mtu", "host_name", "hostfwd"}
	nicTypes = []string{"bridged", "macvlan", "p2p", "physical", "sriov", "ipvlan", "routed", "user"}
)

// ValidateDevice checks one device of a new instance or of a device change: a known type
// (disk, nic), known keys and valid values. A disk's source must be a
// custom volume of pool (checked with vc when non-nil) unless allowPaths
// and source is an absolute host path. Errors wrap errdefs.ErrInvalid
// (errdefs.ErrNotFound for a missing volume) with the precise reason.
func ValidateDevice(ctx context.Context, name string, dev map[string]string, vc VolumeChecker, allowPaths bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invalid device %q: %s: %w", name, fmt.Sprintf(format, args...), errdefs.ErrInvalid)
	}
	if err := checkDeviceName(name); err != nil {
		return err
	}
	var known []string
	switch dev["type"] {
	case "disk":
		known = diskKeys
	case "nic":
		known = nicKeys
	case "":
		return bad("no type (want disk or nic)")
	default:
		return bad("unsupported type %q (want disk or nic)", dev["type"])
	}
	for _, k := range slices.Sorted(maps.Keys(dev)) {
		if !slices.Contains(known, k) {
			return bad("unknown key %q for a %s device (known: %s)", k, dev["type"], strings.Join(known, ", "))
		}
	}
	if dev["type"] == "nic" {
		if v := dev["hwaddr"]; v != "" {
			mac, err := net.ParseMAC(v)
			if err != nil || len(mac) != 6 || v != strings.ToLower(mac.String()) {
				return bad("hwaddr %q is not a MAC address such as 00:16:3e:12:34:56", v)
			}
			if mac[0]&1 == 1 {
				return bad("hwaddr %q is a multicast address", v)
			}
		}
		if v := dev["nictype"]; v != "" && !slices.Contains(nicTypes, v) {
			return bad("unknown nictype %q (known: %s)", v, strings.Join(nicTypes, ", "))
		}
		if v := dev["name"]; v != "" && (len(v) > 15 || strings.ContainsAny(v, "/ \t\n:")) {
			return bad("name %q is not an interface name (at most 15 characters, no /, : or spaces)", v)
		}
		if v := dev["mtu"]; v != "" {
			if n, err := strconv.Atoi(v); err != nil || n < 576 || n > 65535 {
				return bad("mtu %q is not a number from 576 to 65535", v)
			}
		}
		if v, ok := dev["hostfwd"]; ok {
			if dev["nictype"] != "user" {
				return bad("hostfwd is a key of a user nic (nictype=user) only, not of nictype %q", dev["nictype"])
			}
			// The same parser the QEMU backends build their forwards with
			// at create and start: a value refused there is refused here.
			if _, err := hostfwd.Parse(v); err != nil {
				return bad("%v", err)
			}
		}
		return nil
	}
	// disk
	if v, ok := dev["readonly"]; ok {
		if err := checkBool(v); err != nil {
			return bad("readonly: %v", err)
		}
	}
	if v := dev["boot.priority"]; v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return bad("boot.priority %q is not a non-negative number", v)
		}
	}
	p := dev["path"]
	if p != "" && (!path.IsAbs(p) || path.Clean(p) != p) {
		return bad("path %q is not a clean absolute path", p)
	}
	if v, ok := dev["size"]; ok {
		if p != "/" {
			return bad("size is the root disk's (path /) only")
		}
		if n, err := storage.ParseSize(v); err != nil || n <= 0 {
			return bad("size %q is not a size such as 10GiB", v)
		}
	}
	src, pool := dev["source"], dev["pool"]
	switch {
	case src == "" && p == "/":
		return nil // the root disk: of pool, or of the backend (an image's overlay) without one
	case src == "":
		return bad("no source: a disk needs pool=POOL source=VOLUME (a custom volume)")
	case strings.HasPrefix(src, "/"):
		if !allowPaths {
			return bad("source %q is a host path; only storage volumes may be attached (pool=POOL source=VOLUME)", src)
		}
		if pool != "" {
			return bad("source %q is a host path, pool must be empty", src)
		}
		if path.Clean(src) != src {
			return bad("source %q is not a clean absolute path", src)
		}
		return nil
	case pool == "":
		return bad("source %q names a volume but no pool is given (pool=POOL)", src)
	}
	if vc == nil {
		return bad("source %q: this daemon has no storage pools", src)
	}
	if err := vc.CheckVolume(ctx, pool, src); err != nil {
		return fmt.Errorf("invalid device %q: %w", name, err)
	}
	return nil
}

// checkDeviceName checks a device name: 1 to 63 letters, digits, '-', '_'
// or '.', so it can be part of a config key.
func checkDeviceName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("invalid device name %q: 1 to 63 characters: %w", name, errdefs.ErrInvalid)
	}
	for i, r := range name {
		if r != '-' && r != '_' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return fmt.Errorf("invalid device name %q: character %q at position %d is not a letter, digit, '-', '_' or '.': %w", name, r, i, errdefs.ErrInvalid)
		}
	}
	return nil
}

// storeHwaddrs sets volatile.<dev>.hwaddr for every NIC of devs that has
// no hwaddr and no stored one yet.
func storeHwaddrs(config map[string]string, uuid string, devs map[string]map[string]string) {
	for name, d := range devs {
		if d["type"] == "nic" && d["hwaddr"] == "" && config[HwaddrKey(name)] == "" {
			config[HwaddrKey(name)] = GeneratedHwaddr(uuid, name)
		}
	}
}

// VolumePather gives the host file of a storage volume; a VolumeChecker
// that implements it (core/storage) lets the manager hand backends the
// files of disk devices (contract.KeyVolumePath).
type VolumePather interface {
	VolumePath(ctx context.Context, pool, name string) (string, error)
}

// resolveVolumes adds contract.KeyVolumePath to every disk device of a pool
// volume, and of a host path when those are allowed, for the backend. A
// host path that is not allowed is an error when strict (a hot-plug) and
// is left out otherwise (a start: such a disk is not attached).
func (m *Manager) resolveVolumes(ctx context.Context, devs map[string]contract.Device, strict bool) error {
	vp, ok := m.devices.volumes.(VolumePather)
	for name, d := range devs {
		if d["type"] == "disk" && d["pool"] == "" && strings.HasPrefix(d["source"], "/") {
			if !m.devices.allowPaths {
				if !strict {
					m.log.Warn("disk device with a host path left out (guestlinkd --allow-disk-paths)", "device", name, "source", d["source"])
					continue
				}
				return fmt.Errorf("disk %q: source %q is a host path and host paths are not allowed (guestlinkd --allow-disk-paths): %w", name, d["source"], errdefs.ErrInvalid)
			}
			d[contract.KeyVolumePath] = d["source"]
			continue
		}
		if d["type"] != "disk" || d["pool"] == "" || d["source"] == "" {
			continue
		}
		if !ok {
			return fmt.Errorf("disk %q: this daemon has no storage pools: %w", name, errdefs.ErrInvalid)
		}
		path, err := vp.VolumePath(ctx, d["pool"], d["source"])
		if err != nil {
			return fmt.Errorf("disk %q: %w", name, err)
		}
		d[contract.KeyVolumePath] = path
	}
	return nil
}

// UpdateDevices applies a device change to an instance, all or nothing:
// each put device is validated (ValidateDevice), each removed one must
// exist. NICs without hwaddr get volatile.<dev>.hwaddr; a removed device's
// volatile.<dev>.* keys go with it. On a running instance the backend must
// announce CapHotplug and apply the change first; otherwise nothing changes
// and the error (errdefs.ErrConflict) says to stop the instance. It emits
// instance-updated and tells the hooks (the agent monitor sends the guest
// its device events).
func (m *Manager) UpdateDevices(ctx context.Context, name string, u DeviceUpdate, by events.Requestor) (*Instance, error) {
	wrap := func(err error) error { return fmt.Errorf("updating devices of instance %q: %w", name, err) }
	if len(u.Put) == 0 && len(u.Add) == 0 && len(u.Patch) == 0 && len(u.Remove) == 0 {
		return nil, wrap(fmt.Errorf("no device to add, change or remove: %w", errdefs.ErrInvalid))
	}
	if err := checkChangeSize(len(u.Put) + len(u.Remove) + len(u.Config)); err != nil {
		return nil, wrap(err)
	}
	for k := range u.Config {
		if !strings.HasPrefix(k, "volatile.") {
			return nil, wrap(fmt.Errorf("device change may only set volatile.<device>.* keys, not %q: %w", k, errdefs.ErrInvalid))
		}
	}
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	e.op.Lock()
	defer e.op.Unlock()
	rec, _, err := m.snapshot(e)
	if err != nil {
		return nil, wrap(err)
	}
	u, err = resolveDevices(rec.Devices, u)
	if err != nil {
		return nil, wrap(err)
	}
	for _, n := range slices.Sorted(maps.Keys(u.Put)) {
		if err := ValidateDevice(ctx, n, u.Put[n], m.devices.volumes, m.devices.allowPaths); err != nil {
			return nil, wrap(err)
		}
	}
	for n, d := range u.Put {
		if old, ok := rec.Devices[n]; ok && old["type"] != d["type"] {
			return nil, wrap(fmt.Errorf("device %q is a %s, it cannot become a %s (remove it first): %w", n, old["type"], d["type"], errdefs.ErrInvalid))
		}
	}
	if rec.PowerState == status.PowerRunning {
		if err := m.hotplug(ctx, rec.Backend, contract.Handle(slices.Clone(rec.Handle)), u); err != nil {
			return nil, wrap(err)
		}
	}
	var changes []ConfigChange
	view, err := m.mutate(ctx, e, func(c *change) error {
		if c.rec.Devices == nil {
			c.rec.Devices = map[string]map[string]string{}
		}
		before := maps.Clone(c.rec.Config)
		for _, n := range u.Remove {
			delete(c.rec.Devices, n)
			for k := range c.rec.Config {
				if strings.HasPrefix(k, "volatile."+n+".") {
					delete(c.rec.Config, k)
				}
			}
		}
		for n, d := range u.Put {
			c.rec.Devices[n] = maps.Clone(d)
		}
		for k, v := range u.Config {
			if v == "" {
				delete(c.rec.Config, k)
			} else {
				c.rec.Config[k] = v
			}
		}
		storeHwaddrs(c.rec.Config, c.rec.UUID, u.Put)
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(before, c.rec.Config))) {
			if before[k] != c.rec.Config[k] {
				changes = append(changes, ConfigChange{Key: k, OldValue: before[k], Value: c.rec.Config[k]})
			}
		}
		c.persist = true
		c.emit(events.InstanceUpdated, nil, by)
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	m.notify(e, whenRunning, func(h Hooks, inst *Instance) { h.ConfigChanged(inst, changes) })
	return view, nil
}

// resolveDevices turns Add and Patch into Put against the current devices
// and checks names: every removed or patched device exists, no added one
// does, no device is named twice.
func resolveDevices(cur map[string]map[string]string, u DeviceUpdate) (DeviceUpdate, error) {
	out := DeviceUpdate{Put: map[string]map[string]string{}, Remove: u.Remove, Config: u.Config}
	seen := map[string]bool{}
	once := func(n string) error {
		if seen[n] {
			return fmt.Errorf("device %q is named twice in one change: %w", n, errdefs.ErrInvalid)
		}
		seen[n] = true
		return nil
	}
	for _, n := range u.Remove {
		if err := once(n); err != nil {
			return out, err
		}
		if _, ok := cur[n]; !ok {
			return out, fmt.Errorf("device %q: %w", n, errdefs.ErrNotFound)
		}
	}
	for n, d := range u.Put {
		if err := once(n); err != nil {
			return out, err
		}
		out.Put[n] = d
	}
	for n, d := range u.Add {
		if err := once(n); err != nil {
			return out, err
		}
		if _, ok := cur[n]; ok {
			return out, fmt.Errorf("device %q exists (use set to change it): %w", n, errdefs.ErrAlreadyExists)
		}
		out.Put[n] = d
	}
	for n, keys := range u.Patch {
		if err := once(n); err != nil {
			return out, err
		}
		old, ok := cur[n]
		if !ok {
			return out, fmt.Errorf("device %q: %w", n, errdefs.ErrNotFound)
		}
		d := maps.Clone(old)
		for k, v := range keys {
			if k == "type" && v != old["type"] {
				return out, fmt.Errorf("device %q: the type cannot change (remove it and add it again): %w", n, errdefs.ErrInvalid)
			}
			if v == "" {
				delete(d, k)
			} else {
				d[k] = v
			}
		}
		out.Put[n] = d
	}
	return out, nil
}

func mergeKeys(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// hotplug applies a device change to a running guest, or says precisely
// why it cannot.
func (m *Manager) hotplug(ctx context.Context, backend string, h contract.Handle, u DeviceUpdate) error {
	b, info, err := m.backendInfo(ctx, backend)
	if err != nil {
		return err
	}
	hp, ok := b.(Hotplugger)
	if !ok || !slices.Contains(info.Capabilities, CapHotplug) {
		return fmt.Errorf("backend %s cannot hot-plug devices; stop the instance first: %w", backend, errdefs.ErrConflict)
	}
	add := make(map[string]contract.Device, len(u.Put))
	for n, d := range u.Put {
		add[n] = contract.Device(maps.Clone(d))
	}
	if err := m.resolveVolumes(ctx, add, true); err != nil {
		return err
	}
	if err := hp.UpdateDevices(ctx, h, add, u.Remove); err != nil {
		return fmt.Errorf("hot-plugging devices: %w", err)
	}
	return nil
}
