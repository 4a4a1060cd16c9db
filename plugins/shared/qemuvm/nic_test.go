package qemuvm

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/hostfwd/hostfwdtest"
)

func TestParseNICs(t *testing.T) {
	const uuid = "4b9a8c2e-1f3d-4e5a-9b7c-0d1e2f3a4b5c"
	user := func(kv ...string) sdk.Device {
		d := sdk.Device{"type": "nic", "nictype": "user"}
		for i := 0; i+1 < len(kv); i += 2 {
			d[kv[i]] = kv[i+1]
		}
		return d
	}
	good := []struct {
		name string
		cfg  map[string]string
		devs map[string]sdk.Device
		want string // nicArgs joined
	}{
		{"loopback by default", nil, map[string]sdk.Device{"eth0": user("hostfwd", "tcp::2222-:22", "hwaddr", "00:16:3E:00:00:01")},
			"-netdev user,id=net-eth0,hostfwd=tcp:127.0.0.1:2222-:22 -device virtio-net-pci,netdev=net-eth0,id=dev-eth0,mac=00:16:3e:00:00:01,bus=pcie.0,addr=0x18"},
		{"volatile hwaddr wins", map[string]string{"volatile.eth0.hwaddr": "00:16:3e:aa:bb:cc"}, map[string]sdk.Device{"eth0": user("hwaddr", "00:16:3e:00:00:01")},
			"mac=00:16:3e:aa:bb:cc"},
		{"several forwards, explicit addresses", nil, map[string]sdk.Device{"eth0": user("hostfwd", "tcp:10.0.0.1:80-10.0.2.15:8080, udp::5353-:53")},
			"hostfwd=tcp:10.0.0.1:80-10.0.2.15:8080,hostfwd=udp:127.0.0.1:5353-:53"},
		{"derived MAC is stable", nil, map[string]sdk.Device{"eth0": user(), "eth1": user(), "root": {"type": "disk", "path": "/"}},
			"id=dev-eth1,mac=00:16:3e:"},
		{"no nic", nil, map[string]sdk.Device{"root": {"type": "disk", "path": "/"}}, ""},
	}
	for _, tc := range good {
		nics, err := parseNICs(tc.cfg, uuid, tc.devs)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := strings.Join(nicArgs(nics), " ")
		if !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%s: args %q lack %q", tc.name, got, tc.want)
		}
		again, _ := parseNICs(tc.cfg, uuid, tc.devs)
		if strings.Join(nicArgs(again), " ") != got {
			t.Errorf("%s: two parses differ", tc.name)
		}
	}
	bad := []struct {
		name string
		dev  sdk.Device
		msg  string
	}{
		{"bridged", sdk.Device{"type": "nic", "nictype": "bridged", "parent": "br0"}, `nictype "bridged" is not supported`},
		{"no nictype", sdk.Device{"type": "nic"}, `nictype "" is not supported`},
		{"unknown key", user("parent", "br0"), `unknown key "parent"`},
		{"bad MAC", user("hwaddr", "zz"), "not a unicast Ethernet MAC"},
		{"multicast MAC", user("hwaddr", "01:00:5e:00:00:01"), "not a unicast"},
		{"bad rule", user("hostfwd", "tcp:2222:22"), "want tcp|udp:[hostaddr]:hostport-[guestaddr]:guestport"},
		{"sctp", user("hostfwd", "sctp::1-:1"), "want tcp|udp"},
		{"port zero", user("hostfwd", "tcp::0-:22"), "port 0 is outside"},
		{"port too big", user("hostfwd", "tcp::70000-:22"), "port 70000 is outside"},
		{"bad address", user("hostfwd", "tcp:1.2.3:22-:22"), `"1.2.3" is not an IPv4 address`},
		{"option injection", user("hostfwd", "tcp::22-:22,smb=/"), `"smb" is a QEMU option, not a forward`},
		{"guestfwd", user("hostfwd", "tcp::22-:22,guestfwd=tcp:10.0.2.1:1-cmd:sh"), `"guestfwd" is a QEMU option, not a forward`},
		{"twice", user("hostfwd", "tcp::22-:22 tcp:127.0.0.1:22-:23"), "forwards tcp:127.0.0.1:22 twice"},
	}
	for _, tc := range bad {
		_, err := parseNICs(nil, uuid, map[string]sdk.Device{"eth0": tc.dev})
		if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.msg)
		}
	}
	if _, err := parseNICs(nil, uuid, map[string]sdk.Device{"eth,0": user()}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("a nic name with a comma: %v", err)
	}
}

// TestStartRefusesHostfwdTable runs the shared table of refused hostfwd
// values (hostfwdtest, also run by the daemon's device add and launch
// tests) through parseNICs, the check of Create and Start: each is
// refused with the same reason the daemon gives when the device is added.
func TestStartRefusesHostfwdTable(t *testing.T) {
	const uuid = "4b9a8c2e-1f3d-4e5a-9b7c-0d1e2f3a4b5c"
	for _, tc := range hostfwdtest.Refused {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := parseNICs(nil, uuid, map[string]sdk.Device{"eth0": {"type": "nic", "nictype": "user", "hostfwd": tc.Value}})
			if want := `device "eth0": ` + tc.Reason; !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Errorf("hostfwd %q: %v, want ErrInvalid saying %q", tc.Value, err, want)
			}
		})
	}
	for _, v := range hostfwdtest.Accepted {
		if _, err := parseNICs(nil, uuid, map[string]sdk.Device{"eth0": {"type": "nic", "nictype": "user", "hostfwd": v}}); err != nil {
			t.Errorf("hostfwd %q: %v", v, err)
		}
	}
}
