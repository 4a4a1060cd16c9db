package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// debian13BootTimeout bounds the Debian 13 guest's boot to Ready (TCG on
// a loaded 2-core machine).
const debian13BootTimeout = 12 * time.Minute

// debian13Image returns bin/images/debian-13.img (make
// guest-image-debian-13), or $GUESTLINK_DEBIAN13_IMAGE.
func debian13Image(t *testing.T) string {
	t.Helper()
	return builtImage(t, "GUESTLINK_DEBIAN13_IMAGE", "debian-13.img", "the Debian 13 guest image", "make guest-image-debian-13")
}

// TestQEMUDebianSystemdReady boots the Debian 13 image (systemd 257) on
// guestlink's user-space vsock device with the image's own Ready unit
// switched off by user-data, so nothing in the guest declares Ready
// through the agent: the guest becomes Ready all the same, from systemd's
// READY=1 sent over vsock to the vmm.notify_socket the QEMU backend gives
// it, and the timeline (shown by guestlink info) names systemd as the
// cause, never devlxd. Through the agent it checks that the switch held
// (guestlink-ready.service did not run) and that systemd had the
// credential, then the host's switch (checkNotifySwitch).
func TestQEMUDebianSystemdReady(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.Requires(t, "qemu-system-x86_64", "not installed (scripts/install-deps.sh installs qemu-system-x86)")
	}
	disk := debian13Image(t)
	binaries(t)
	d := newDaemon(t, "--plugin-dir", qemuPlugins(t), "--default-backend", "qemu")
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()

	props := map[string]string{}
	if b, err := os.ReadFile(strings.TrimSuffix(disk, ".img") + ".json"); err != nil || json.Unmarshal(b, &props) != nil {
		t.Fatalf("the image's debian-13.json: %v", err)
	}
	if props["release"] != "13" || props["suite"] != "trixie" {
		t.Fatalf("debian-13.json records release %q suite %q, want 13 trixie", props["release"], props["suite"])
	}
	if _, err := d.client.ImportImage(ctx, api.ImagesPost{Path: disk, Alias: "debian-13", Properties: props}); err != nil {
		t.Fatal(err)
	}
	// Nothing but systemd may declare Ready: the image's unit is off.
	const userData = `#cloud-config
write_files:
  - path: /etc/guestlink/ready.disabled
    content: ""
`
	const name = "deb13"
	start := time.Now()
	_, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Image: "debian-13", Start: true,
		Config: map[string]string{"qemu.accel": "auto", "qemu.cpus": "2", "qemu.vsock": "user", "cloud-init.user-data": userData}})
	if err != nil {
		t.Fatalf("launching %s: %v", name, err)
	}
	inst := d.waitInstance(ctx, name, "Ready", debian13BootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})
	t.Logf("%s: Ready %v after launch (accel %s, vsock %s)", name, time.Since(start).Round(time.Millisecond), inst.Details["accel"], inst.Details["vsock"])
	if inst.ReadyAt != nil && inst.StartedAt != nil {
		t.Logf("%s: Ready %v after the start", name, inst.ReadyAt.Sub(*inst.StartedAt).Round(time.Millisecond))
	}
	if inst.Details["vsock"] != "user" {
		t.Errorf("vsock device %q, want user", inst.Details["vsock"])
	}

	tl, err := d.client.Timeline(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	var causes []string
	for _, e := range tl {
		if e.Kind == "ready" && e.To == "true" {
			causes = append(causes, e.Cause)
		}
	}
	if len(causes) != 1 || causes[0] != "systemd" {
		t.Fatalf("Ready came from %q, want once from systemd (timeline %+v)", causes, tl)
	}
	info := d.cli(ctx, "info", name)
	readyRow := false
	for _, line := range strings.Split(info, "\n") {
		// TIME BOOT KIND FROM TO CAUSE DETAIL; FROM may be empty.
		f := strings.Fields(line)
		for i := 3; i+2 < len(f) && i <= 4; i++ {
			if f[3] == "ready" && f[i+1] == "true" && f[i+2] == "systemd" {
				readyRow = true
			}
		}
	}
	if !readyRow {
		t.Errorf("guestlink info shows no ready row caused by systemd:\n%s", info)
	}

	// Through the agent: the image's Ready unit did not run, and systemd
	// had the credential the backend passed.
	if got, _, _ := d.runCLI(ctx, "exec", name, "--", "systemctl", "show", "-P", "ConditionResult", "guestlink-ready.service"); strings.TrimSpace(got) != "no" {
		t.Errorf("guestlink-ready.service's condition result %q, want no (switched off by /etc/guestlink/ready.disabled)", strings.TrimSpace(got))
	}
	if got, _, _ := d.runCLI(ctx, "exec", name, "--", "systemd-creds", "--system", "cat", "vmm.notify_socket"); strings.TrimSpace(got) != "vsock-stream:2:8442" {
		t.Errorf("the guest's vmm.notify_socket credential %q, want vsock-stream:2:8442", strings.TrimSpace(got))
	}
	checkNotifySwitch(ctx, t, d, name)
	if err := d.client.Delete(ctx, name, true); err != nil {
		t.Fatal(err)
	}
}

// checkNotifySwitch checks the host's switch on the booted guest:
// with readiness.systemd_notify=false the READY=1 systemd sends after a
// daemon-reload is ignored (the daemon's log says so: the explicit signal
// that it came) and the agent's Started stands; back to true, the next one
// declares Ready again.
func checkNotifySwitch(ctx context.Context, t *testing.T, d *daemonProc, name string) {
	t.Helper()
	const ignored = "guest's systemd READY=1 ignored"
	d.cli(ctx, "config", "set", name, "readiness.systemd_notify=false")
	d.cli(ctx, "exec", name, "--", "guestlink-agent", "started")
	d.waitInstance(ctx, name, "Running (the agent's Started)", 2*time.Minute, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Running)
	})
	d.cli(ctx, "exec", name, "--", "systemctl", "daemon-reload")
	if !testwait.Until(2*time.Minute, func() bool { return strings.Contains(d.log(), ignored) }) {
		t.Fatalf("no %q in the daemon's log after systemctl daemon-reload with readiness.systemd_notify=false", ignored)
	}
	if inst, err := d.client.Instance(ctx, name); err != nil || inst.StatusCode != int(status.Running) {
		t.Errorf("after an ignored READY=1: %+v, %v; want still Running (Started)", inst, err)
	}
	d.cli(ctx, "config", "set", name, "readiness.systemd_notify=true")
	d.cli(ctx, "exec", name, "--", "systemctl", "daemon-reload")
	d.waitInstance(ctx, name, "Ready again from systemd", 2*time.Minute, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})
}
