package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

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

	t0 := time.Now()
	d.cli(ctx, "config", "device", "add", name, "data", "disk", "pool=default", "source=hp-vol")
	t.Logf("config device add (hot-plug) took %v", time.Since(t0).Round(time.Millisecond))
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
	// Cold-plug: after a restart the disk is there from the start.
	d.cli(ctx, "stop", name, "--force")
	d.cli(ctx, "start", name)
	d.waitInstance(ctx, name, "Ready again", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Boot == 2
	})
	if !testwait.Until(qemuOpTimeout, func() bool {
		b, _ := os.ReadFile(consoleLog)
		console = string(b)
		return disk.MatchString(console) && strings.Count(console, "guestlink: ready") == 1
	}) {
		t.Fatalf("after a restart the guest's kernel did not report the disk; console:\n%s", tailString(console, 3000))
	}
	// A stateful stop and restore keeps the disk (the restore's command line
	// has it where the saved state expects it).
	d.cli(ctx, "stop", name, "--stateful")
	d.cli(ctx, "start", name)
	d.waitInstance(ctx, name, "running after restore", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Boot == 3
	})
	// Unplug: returns once the guest released the disk.
	t0 = time.Now()
	d.cli(ctx, "config", "device", "remove", name, "data")
	t.Logf("config device remove (unplug, guest acknowledged) took %v", time.Since(t0).Round(time.Millisecond))
	if inst, _ := d.client.Instance(ctx, name); len(inst.Devices) != 0 {
		t.Fatalf("devices after detach: %v", inst.Devices)
	}
	d.cli(ctx, "storage", "volume", "delete", "default", "hp-vol")
	d.cli(ctx, "stop", name, "--force")
}

// consoleAnswer waits for the guest's console line "guestlink: <what>
// <base64>" (the ready script's trusted requests) and returns the decoded
// HTTP answer's status and body.
func consoleAnswer(ctx context.Context, t *testing.T, consoleLog, what string) (int, string) {
	t.Helper()
	prefix := "guestlink: " + what + " "
	var rest, console string
	if !testwait.Until(qemuOpTimeout, func() bool {
		if ctx.Err() != nil {
			return false
		}
		b, _ := os.ReadFile(consoleLog)
		console = string(b)
		lines := strings.Split(console, "\n")
		for _, l := range lines[:len(lines)-1] {
			if r, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), prefix); ok {
				rest = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no %q on the guest console; console:\n%s", what, tailString(console, 3000))
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		t.Fatalf("%s: the guest printed %q, not base64 (%v)", what, rest, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%s: not HTTP (%v): %q", what, err, raw)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestQEMUTrustedHotplug is issue 11's end to end: a busybox guest (TCG)
// with a devlxd bearer token creates a volume through /dev/lxd/sock,
// attaches it to itself with PATCH /1.0/instances/{name}, its kernel sees
// the new disk, and it receives the devlxd device event; without the token
// the same request gets LXD's refusal.
func TestQEMUTrustedHotplug(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	const name = "vm-csi"
	d.cli(ctx, "auth", "identity", "create", "devlxd/csi", "--instance", name)
	token := strings.TrimSpace(d.cli(ctx, "auth", "identity", "token", "issue", "devlxd/csi"))
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	create := `{"name":"csi-vol","type":"custom","config":{"size":"8MiB"}}`
	attach := `{"devices":{"csi-vol":{"type":"disk","pool":"default","source":"csi-vol"}}}`
	appendArgs := strings.Join([]string{
		"loglevel=6", "guestlink.token=" + token, "guestlink.events=1",
		"guestlink.req=GET,/1.0/instances/" + name + ",,noauth",
		"guestlink.req=GET,/1.0,,auth",
		"guestlink.req=POST,/1.0/storage-pools/default/volumes/custom," + b64(create) + ",auth",
		"guestlink.req=PATCH,/1.0/instances/" + name + "," + b64(attach) + ",auth",
	}, " ")
	cfg := qemuConfig(img, "", map[string]string{"qemu.append": appendArgs, "security.devlxd.management.volumes": "true"})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu", Config: cfg, Start: true}); err != nil {
		t.Fatal(err)
	}
	inst := d.waitInstance(ctx, name, "Ready", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})
	consoleLog := inst.Details["console_log"]

	if code, body := consoleAnswer(ctx, t, consoleLog, "GET /1.0/instances/"+name); code != 403 || body != "You must be authenticated\n" {
		t.Fatalf("untrusted GET /1.0/instances/%s: %d %q", name, code, body)
	}
	if code, body := consoleAnswer(ctx, t, consoleLog, "GET /1.0"); code != 200 || !strings.Contains(body, `"auth":"trusted"`) {
		t.Fatalf("GET /1.0 with the token: %d %q", code, body)
	}
	if code, body := consoleAnswer(ctx, t, consoleLog, "POST /1.0/storage-pools/default/volumes/custom"); code != 200 || !strings.Contains(body, `"status":"Success"`) {
		t.Fatalf("volume create: %d %q", code, body)
	}
	if code, body := consoleAnswer(ctx, t, consoleLog, "PATCH /1.0/instances/"+name); code != 200 {
		t.Fatalf("attach: %d %q", code, body)
	}
	// The guest's kernel sees the disk (8 MiB = 16384 sectors).
	disk := regexp.MustCompile(`virtio_blk virtio\d+: \[vd[a-z]+\] 16384 512-byte logical blocks`)
	var console string
	if !testwait.Until(qemuOpTimeout, func() bool {
		b, _ := os.ReadFile(consoleLog)
		console = string(b)
		return disk.MatchString(console)
	}) {
		t.Fatalf("the guest's kernel did not report the attached disk; console:\n%s", tailString(console, 3000))
	}
	// And the device event reached /1.0/events in the guest, LXD's shape.
	var ev struct {
		Type     string `json:"type"`
		Metadata struct {
			Action string            `json:"action"`
			Name   string            `json:"name"`
			Config map[string]string `json:"config"`
		} `json:"metadata"`
	}
	if !testwait.Until(qemuOpTimeout, func() bool {
		b, _ := os.ReadFile(consoleLog)
		console = string(b)
		for _, l := range strings.Split(console, "\n") {
			if r, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), "guestlink: EVENT "); ok {
				raw, _ := base64.StdEncoding.DecodeString(r)
				if json.Unmarshal(raw, &ev) == nil && ev.Type == "device" && ev.Metadata.Name == "csi-vol" {
					return true
				}
			}
		}
		return false
	}) {
		t.Fatalf("no device event for csi-vol in the guest; console:\n%s", tailString(console, 3000))
	}
	if ev.Metadata.Action != "added" || ev.Metadata.Config["source"] != "csi-vol" || ev.Metadata.Config["type"] != "disk" {
		t.Fatalf("device event %+v, want added csi-vol", ev)
	}
	if inst, _ := d.client.Instance(ctx, name); inst.Devices["csi-vol"]["source"] != "csi-vol" || inst.Config["volatile.csi-vol.devlxd.owner"] != "devlxd/csi" {
		t.Fatalf("host view after attach: devices %v", inst.Devices)
	}
	d.cli(ctx, "stop", name, "--force")
}
