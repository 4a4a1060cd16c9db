package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestDeviceCommands drives guestlink config device add|set|unset|remove|
// list against the real daemon: validation, the stored NIC MAC, and the
// precise refusal of a running sim guest (sim cannot hot-plug).
func TestDeviceCommands(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "dev1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	d.cli(ctx, "config", "device", "add", "dev1", "eth1", "nic", "nictype=bridged", "parent=br0")
	inst, err := d.client.Instance(ctx, "dev1")
	if err != nil {
		t.Fatal(err)
	}
	mac := inst.Config["volatile.eth1.hwaddr"]
	if !macRE.MatchString(mac) || !strings.HasPrefix(mac, "00:16:3e:") {
		t.Fatalf("volatile.eth1.hwaddr = %q, want a stored 00:16:3e MAC", mac)
	}
	d.cli(ctx, "config", "device", "set", "dev1", "eth1", "parent=br1", "mtu=1400")
	d.cli(ctx, "config", "device", "unset", "dev1", "eth1", "mtu")
	list := d.cli(ctx, "config", "device", "list", "dev1")
	if !strings.Contains(list, "eth1") || !strings.Contains(list, "nictype=bridged parent=br1") || strings.Contains(list, "mtu") {
		t.Fatalf("device list:\n%s", list)
	}
	if inst, _ := d.client.Instance(ctx, "dev1"); inst.Config["volatile.eth1.hwaddr"] != mac {
		t.Fatalf("the stored MAC changed to %q", inst.Config["volatile.eth1.hwaddr"])
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "dev1", "eth1", "nic"}, `Error: updating devices of instance "dev1": device "eth1" exists (use set to change it): already exists`},
		{[]string{"add", "dev1", "d1", "disk", "source=/etc"}, `Error: updating devices of instance "dev1": invalid device "d1": source "/etc" is a host path; only storage volumes may be attached (pool=POOL source=VOLUME): invalid argument`},
		{[]string{"add", "dev1", "g1", "gpu"}, `Error: updating devices of instance "dev1": invalid device "g1": unsupported type "gpu" (want disk or nic): invalid argument`},
		{[]string{"add", "dev1", "eth2", "nic", "hwaddr=zz"}, `Error: updating devices of instance "dev1": invalid device "eth2": hwaddr "zz" is not a MAC address such as 00:16:3e:12:34:56: invalid argument`},
		{[]string{"set", "dev1", "nope", "mtu=1500"}, `Error: updating devices of instance "dev1": device "nope": not found`},
		{[]string{"remove", "dev1", "nope"}, `Error: updating devices of instance "dev1": device "nope": not found`},
	} {
		_, errOut, err := d.runCLI(ctx, append([]string{"config", "device"}, tt.args...)...)
		if err == nil || strings.TrimSpace(errOut) != tt.want {
			t.Errorf("config device %s: err %v, stderr %q\nwant %q", strings.Join(tt.args, " "), err, errOut, tt.want)
		}
	}
	// A running sim guest cannot change devices: precise refusal, nothing changes.
	d.cli(ctx, "start", "dev1")
	_, errOut, err := d.runCLI(ctx, "config", "device", "remove", "dev1", "eth1")
	if want := `Error: updating devices of instance "dev1": backend sim cannot hot-plug devices; stop the instance first: conflict`; err == nil || strings.TrimSpace(errOut) != want {
		t.Fatalf("remove on a running sim guest: %v %q, want %q", err, errOut, want)
	}
	d.cli(ctx, "stop", "dev1", "--force")
	d.cli(ctx, "config", "device", "remove", "dev1", "eth1")
	if inst, _ := d.client.Instance(ctx, "dev1"); len(inst.Devices) != 0 || inst.Config["volatile.eth1.hwaddr"] != "" {
		t.Fatalf("after remove: devices %v, config %v", inst.Devices, inst.Config)
	}
}
