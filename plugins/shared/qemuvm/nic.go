package qemuvm

import (
	"crypto/sha256"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/hostfwd"
)

// nic is one user-mode network device of a guest.
type nic struct {
	name string   // device name
	mac  string   // virtio-net MAC
	fwd  []string // QEMU hostfwd rules, host address always explicit
}

// devNameRE is what a device name may be to become a QEMU id.
var devNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)

// nicMAC returns the MAC of device dev: volatile.<dev>.hwaddr from the
// instance config, else the device's hwaddr key, else one derived from the
// guest's UUID and the device name (LXD's 00:16:3e prefix), stable across
// starts without being stored. The daemon's device model stores
// volatile.<dev>.hwaddr when a nic is added or its instance created; the
// derivation serves nics that reach a backend without one.
func nicMAC(cfg map[string]string, uuid, dev string, d sdk.Device) (string, error) {
	mac := cfg["volatile."+dev+".hwaddr"]
	if mac == "" {
		mac = d["hwaddr"]
	}
	if mac == "" {
		h := sha256.Sum256([]byte(uuid + "/" + dev))
		return fmt.Sprintf("00:16:3e:%02x:%02x:%02x", h[0], h[1], h[2]), nil
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || hw[0]&1 == 1 {
		return "", fmt.Errorf("%w: device %q: hwaddr %q is not a unicast Ethernet MAC", sdk.ErrInvalid, dev, mac)
	}
	return hw.String(), nil
}

// parseHostfwd parses the device key hostfwd with hostfwd.Parse, the
// check the daemon makes when the device is added.
func parseHostfwd(dev, v string) ([]string, error) {
	out, err := hostfwd.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %v", sdk.ErrInvalid, dev, err)
	}
	return out, nil
}

// nicKeys are the keys a user nic device may have.
var nicKeys = []string{"type", "nictype", "hwaddr", "hostfwd", "name"}

// parseNICs returns the guest's nic devices in name order; every nic must
// be nictype=user. Errors wrap sdk.ErrInvalid.
func parseNICs(cfg map[string]string, uuid string, devices map[string]sdk.Device) ([]nic, error) {
	var out []nic
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range devices {
			if !yield(k) {
				return
			}
		}
	}) {
		d := devices[name]
		if d["type"] != "nic" {
			continue
		}
		if d["nictype"] != "user" {
			return nil, fmt.Errorf("%w: device %q: nictype %q is not supported by the QEMU backends (they have: user)", sdk.ErrInvalid, name, d["nictype"])
		}
		if !devNameRE.MatchString(name) {
			return nil, fmt.Errorf("%w: device %q: a nic's name is 1 to 32 letters, digits, '-' and '_'", sdk.ErrInvalid, name)
		}
		for k := range d {
			if !slices.Contains(nicKeys, k) {
				return nil, fmt.Errorf("%w: device %q: unknown key %q for a user nic (known: %s)", sdk.ErrInvalid, name, k, strings.Join(nicKeys, ", "))
			}
		}
		mac, err := nicMAC(cfg, uuid, name, d)
		if err != nil {
			return nil, err
		}
		fwd, err := parseHostfwd(name, d["hostfwd"])
		if err != nil {
			return nil, err
		}
		out = append(out, nic{name: name, mac: mac, fwd: fwd})
	}
	if len(out) > 8 {
		return nil, fmt.Errorf("%w: %d nic devices, at most 8", sdk.ErrInvalid, len(out))
	}
	return out, nil
}

// nicArgs returns QEMU's arguments for the nics (PCI slots 0x18..0x1f;
// 0x10..0x17 are the hot-plug ports, hotplug.go).
func nicArgs(nics []nic) []string {
	var a []string
	for i, n := range nics {
		netdev := "user,id=net-" + n.name
		for _, f := range n.fwd {
			netdev += ",hostfwd=" + f
		}
		a = append(a, "-netdev", netdev,
			"-device", fmt.Sprintf("virtio-net-pci,netdev=net-%s,id=dev-%s,mac=%s,bus=pcie.0,addr=0x%x", n.name, n.name, n.mac, nicPortAddr+i))
	}
	return a
}

// nicPortAddr is the PCI slot of the first nic on pcie.0: after the
// hot-plug ports (hotplugPortAddr, hotplugPorts of them).
const nicPortAddr = hotplugPortAddr + hotplugPorts
