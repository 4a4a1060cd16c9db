// Package guestview says what a guest may see of its instance through devlxd:
// which config keys, its meta-data, its devices (with generated MACs) and
// whether devlxd is enabled at all. The devlxd handlers and the agent
// monitor's device events share it; it imports no HTTP framework.
package guestview

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"

	"github.com/guestlink/guestlink/core/instance"
)

// DevlxdEnabled reports whether the guest API is enabled: security.devlxd is
// anything but a false value ("false", "0", "no", "off", any case), as LXD's
// shared.IsFalse.
func DevlxdEnabled(config map[string]string) bool {
	switch strings.ToLower(config["security.devlxd"]) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// ImagesEnabled reports whether GET /1.0/images/{fingerprint}/export is
// allowed: security.devlxd.images is set and not a false value (LXD enables
// every devlxd feature but devlxd itself only when set).
func ImagesEnabled(config map[string]string) bool {
	v := config["security.devlxd.images"]
	return v != "" && DevlxdEnabled(map[string]string{"security.devlxd": v})
}

// VisibleKey reports whether a config key may be read by the guest: keys
// under user. and cloud-init., and guestlink's readiness.probe.* (the
// agent runs the probes they configure).
func VisibleKey(k string) bool {
	return strings.HasPrefix(k, "user.") || strings.HasPrefix(k, "cloud-init.") || strings.HasPrefix(k, "readiness.probe.")
}

// ListedKeys returns, sorted, the keys GET /1.0/config lists: the visible
// keys with a non-empty value, except cloud-init.ssh-keys.*.
func ListedKeys(config map[string]string) []string {
	keys := make([]string, 0, len(config))
	for k, v := range config {
		if !VisibleKey(k) || strings.HasPrefix(k, "cloud-init.ssh-keys.") || v == "" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MetaData returns the cloud-init meta-data of an instance: its instance-id
// (volatile.cloud-init.instance-id, else its UUID), its name as
// local-hostname, then user.meta-data verbatim.
func MetaData(inst *instance.Instance) string {
	id := inst.Config["volatile.cloud-init.instance-id"]
	if id == "" {
		id = inst.UUID
	}
	return "instance-id: " + id + "\nlocal-hostname: " + inst.Name + "\n" + inst.Config["user.meta-data"]
}

// Devices returns an instance's devices as the guest sees them: each device's
// config, NICs without hwaddr given volatile.<dev>.hwaddr or, when unset,
// GeneratedMAC. The result is a copy.
func Devices(inst *instance.Instance) map[string]map[string]string {
	out := make(map[string]map[string]string, len(inst.Devices))
	for name := range inst.Devices {
		out[name] = Device(inst, name)
	}
	return out
}

// Device returns one device of an instance as the guest sees it (see
// Devices), or nil when the instance has no such device.
func Device(inst *instance.Instance, name string) map[string]string {
	dev, ok := inst.Devices[name]
	if !ok {
		return nil
	}
	d := make(map[string]string, len(dev)+1)
	for k, v := range dev {
		d[k] = v
	}
	if d["type"] == "nic" && d["hwaddr"] == "" {
		if mac := inst.Config["volatile."+name+".hwaddr"]; mac != "" {
			d["hwaddr"] = mac
		} else {
			d["hwaddr"] = GeneratedMAC(inst.UUID, name)
		}
	}
	return d
}

// GeneratedMAC is the MAC address of a NIC that has none configured: the
// LXD-style 00:16:3e prefix and three bytes derived from the instance UUID
// and the device name, so it is the same at every start.
func GeneratedMAC(uuid, device string) string {
	h := sha256.Sum256([]byte(uuid + "\x00" + device))
	return fmt.Sprintf("00:16:3e:%02x:%02x:%02x", h[0], h[1], h[2])
}
