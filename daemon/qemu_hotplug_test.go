package daemon_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testwait"
)

// TestQEMUHotplug hot-plugs a storage volume into a running busybox guest
// (TCG) with the real CLI and sees the guest's kernel take it as a
// virtio-blk disk of the volume's size, then unplugs it: the daemon's
// device change, the plugin's QMP blockdev-add/device_add, and
// device_del/DEVICE_DELETED/blockdev-del with the guest's acknowledgement.
func TestQEMUHotplug(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	const name = "vm-hotplug"
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Config: qemuConfig(img, "", map[string]string{
		"qemu.append": "loglevel=6", // the kernel's notice of a new disk reaches the console
	}), Start: true}); err != nil {
		t.Fatal(err)
	}
	inst := d.waitInstance(ctx, name, "Ready", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	consoleLog := inst.Details["console_log"]
	d.cli(ctx, "storage", "volume", "create", "default", "hp-vol", "size=8MiB")

	d.cli(ctx, "config", "device", "add", name, "data", "disk", "pool=default", "source=hp-vol")
	// 8 MiB = 16384 sectors of 512 bytes.
	disk := regexp.MustCompile(`virtio_blk virtio\d+: \[(vd[a-z]+)\] 16384 512-byte logical blocks`)
	var console string
	if !testwait.Until(qemuOpTimeout, func() bool {
		b, _ := os.ReadFile(consoleLog)
		console = string(b)
		return disk.MatchString(console)
	}) {
		t.Fatalf("the guest's kernel did not report the hot-plugged disk; console:\n%s", tailString(console, 3000))
	}
	t.Logf("guest sees %s", disk.FindStringSubmatch(console)[1])
	if inst, _ := d.client.Instance(ctx, name); inst.Devices["data"]["source"] != "hp-vol" {
		t.Fatalf("devices after attach: %v", inst.Devices)
	}
	// The volume is in use: it cannot go.
	if _, errOut, err := d.runCLI(ctx, "storage", "volume", "delete", "default", "hp-vol"); err == nil || !strings.Contains(errOut, "used by instance vm-hotplug") {
		t.Fatalf("deleting an attached volume: %v %q", err, errOut)
	}
	// Unplug: returns once the guest released the disk.
	d.cli(ctx, "config", "device", "remove", name, "data")
	if inst, _ := d.client.Instance(ctx, name); len(inst.Devices) != 0 {
		t.Fatalf("devices after detach: %v", inst.Devices)
	}
	d.cli(ctx, "storage", "volume", "delete", "default", "hp-vol")
	d.cli(ctx, "stop", name, "--force")
}
