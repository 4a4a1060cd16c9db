package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/plugins/sdk/hostfwd/hostfwdtest"
)

// TestDeviceAddValidatedAsAtStart adds a user nic with each hostfwd value
// the QEMU backends refuse at start (the shared hostfwdtest table, which
// plugins/shared/qemuvm's TestStartRefusesHostfwdTable runs through the
// start-time check) to a stopped sim instance through the real admin API:
// each is a 400 naming the device and the reason, and nothing is stored.
// The same device given at launch gets the same message and creates
// nothing; the CLI prints it; good values are still accepted.
func TestDeviceAddValidatedAsAtStart(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "fwd"
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	before, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range hostfwdtest.Refused {
		t.Run(tc.Name, func(t *testing.T) {
			dev := map[string]string{"type": "nic", "nictype": "user", "hostfwd": tc.Value}
			body, _ := json.Marshal(api.DevicesPost{Name: "eth0", Device: dev})
			reason := `invalid device "eth0": ` + tc.Reason + ": invalid argument"
			code, msg := adminDo(ctx, t, d, "POST", "/1.0/instances/"+name+"/devices", string(body))
			if want := `updating devices of instance "fwd": ` + reason; code != 400 || msg != want {
				t.Errorf("device add: %d %q\nwant 400 %q", code, msg, want)
			}
			launch := fmt.Sprintf("fwd-launch-%d", i)
			body, _ = json.Marshal(api.InstancesPost{Name: launch, Backend: "sim", Devices: map[string]map[string]string{"eth0": dev}, Start: true})
			code, msg = adminDo(ctx, t, d, "POST", "/1.0/instances", string(body))
			if want := `creating instance "` + launch + `": ` + reason; code != 400 || msg != want {
				t.Errorf("launch: %d %q\nwant 400 %q", code, msg, want)
			}
			if code, _ := adminDo(ctx, t, d, "GET", "/1.0/instances/"+launch, ""); code != 404 {
				t.Errorf("the refused launch left instance %s (GET: %d)", launch, code)
			}
		})
	}
	if after, err := d.client.Instance(ctx, name); err != nil || !reflect.DeepEqual(after.Devices, before.Devices) || !reflect.DeepEqual(after.Config, before.Config) {
		t.Fatalf("refused device adds changed the instance: %v\ndevices %v -> %v\nconfig %v -> %v", err, before.Devices, after.Devices, before.Config, after.Config)
	}

	// The probe's own command: guestfwd with cmd: after a good forward.
	_, errOut, err := d.runCLI(ctx, "config", "device", "add", name, "eth0", "nic", "nictype=user", "hostfwd=tcp::2222-:22,guestfwd=tcp:10.0.2.100:1234-cmd:/bin/sh")
	if want := `Error: updating devices of instance "fwd": invalid device "eth0": hostfwd "guestfwd=tcp:10.0.2.100:1234-cmd:/bin/sh": "guestfwd" is a QEMU option, not a forward; a rule is only tcp|udp:[hostaddr]:hostport-[guestaddr]:guestport, e.g. tcp::2222-:22: invalid argument`; err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("guestlink config device add with guestfwd: %v %q\nwant %q", err, errOut, want)
	}
	_, errOut, err = d.runCLI(ctx, "config", "device", "add", name, "eth0", "nic", "nictype=bridged", "parent=br0", "hostfwd=tcp::2222-:22")
	if want := `Error: updating devices of instance "fwd": invalid device "eth0": hostfwd is a key of a user nic (nictype=user) only, not of nictype "bridged": invalid argument`; err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("hostfwd on a bridged nic: %v %q\nwant %q", err, errOut, want)
	}

	for i, v := range hostfwdtest.Accepted {
		dev := fmt.Sprintf("eth%d", i)
		d.cli(ctx, "config", "device", "add", name, dev, "nic", "nictype=user", "hostfwd="+v)
		inst, err := d.client.Instance(ctx, name)
		if err != nil || inst.Devices[dev]["hostfwd"] != v {
			t.Errorf("hostfwd %q: stored %v, %v", v, inst.Devices[dev], err)
		}
	}

	// Changing a stored nic's forwards goes through the same check.
	_, errOut, err = d.runCLI(ctx, "config", "device", "set", name, "eth1", "hostfwd=tcp::99999-:22")
	if want := `Error: updating devices of instance "fwd": invalid device "eth1": hostfwd "tcp::99999-:22": port 99999 is outside 1..65535: invalid argument`; err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("config device set with port 99999: %v %q\nwant %q", err, errOut, want)
	}
	if inst, err := d.client.Instance(ctx, name); err != nil || inst.Devices["eth1"]["hostfwd"] != hostfwdtest.Accepted[1] {
		t.Errorf("after the refused set eth1 is %v (%v), want hostfwd %q", inst.Devices["eth1"], err, hostfwdtest.Accepted[1])
	}
}

// TestInvalidUTF8Refused sends config values that are not valid UTF-8 (a
// stray byte, a truncated sequence, a lone surrogate escape) in every JSON
// body that carries them (PATCH and PUT of an instance, device add and
// patch, launch, storage volume create) to the real daemon: each is a 400
// naming the byte offset and nothing is stored, where encoding/json used
// to store U+FFFD. Multi-byte UTF-8 is stored byte for byte. The CLI
// refuses such a value before sending it, and a guest's devlxd PATCH
// /1.0 with one is refused too.
func TestInvalidUTF8Refused(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "utf8"
	g := d.launch(ctx, name, map[string]string{"user.keep": "1"}, map[string]map[string]string{"eth0": {"type": "nic", "nictype": "user"}})
	before := snapshot(ctx, t, d)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	devsBefore := inst.Devices

	for _, tc := range []struct {
		name, method, path, body string
		offset                   int
	}{
		{"PATCH config, stray byte", "PATCH", "/1.0/instances/utf8", "{\"config\":{\"user.x\":\"caf\xe9\"}}", 24},
		{"PATCH config, truncated sequence", "PATCH", "/1.0/instances/utf8", "{\"config\":{\"user.x\":\"\xe6\x97\"}}", 21},
		{"PATCH config, lone surrogate escape", "PATCH", "/1.0/instances/utf8", `{"config":{"user.x":"a\ud800b"}}`, 22},
		{"PATCH config key", "PATCH", "/1.0/instances/utf8", "{\"config\":{\"user.\xff\":\"1\"}}", 17},
		{"PUT instance", "PUT", "/1.0/instances/utf8", "{\"restore\":\"s\xff\"}", 13},
		{"device add", "POST", "/1.0/instances/utf8/devices", "{\"name\":\"eth9\",\"device\":{\"type\":\"nic\",\"name\":\"e\xff\"}}", 47},
		{"device patch", "PATCH", "/1.0/instances/utf8/devices/eth0", "{\"config\":{\"name\":\"e\xff\"}}", 20},
		{"launch", "POST", "/1.0/instances", "{\"name\":\"utf8b\",\"backend\":\"sim\",\"config\":{\"user.x\":\"\xc0\xaf\"}}", 52},
		{"storage volume", "POST", "/1.0/storage-pools/default/volumes/custom", "{\"name\":\"v1\",\"description\":\"\xff\"}", 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := adminDo(ctx, t, d, tc.method, tc.path, tc.body)
			if want := fmt.Sprintf("request body is not valid UTF-8 (byte offset %d)", tc.offset); code != 400 || msg != want {
				t.Errorf("%s %s: %d %q, want 400 %q", tc.method, tc.path, code, msg, want)
			}
		})
	}
	if code, _ := adminDo(ctx, t, d, "GET", "/1.0/instances/utf8b", ""); code != 404 {
		t.Errorf("the refused launch created utf8b (GET: %d)", code)
	}
	if vols, err := d.client.StorageVolumes(ctx, "default"); err != nil || len(vols) != 0 {
		t.Errorf("the refused volume create stored %v (%v)", vols, err)
	}

	// The CLI refuses the value itself: encoding it would send U+FFFD.
	_, errOut, err := d.runCLI(ctx, "config", "set", name, "user.x=caf\xe9")
	if want := "Error: invalid config \"user.x=caf\\xe9\": not valid UTF-8 (byte offset 10)"; err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("guestlink config set with a stray byte: %v %q, want %q", err, errOut, want)
	}
	_, errOut, err = d.runCLI(ctx, "config", "device", "add", name, "eth9", "nic", "name=e\xff")
	if want := "Error: invalid device key \"name=e\\xff\": not valid UTF-8 (byte offset 6)"; err == nil || strings.TrimSpace(errOut) != want {
		t.Errorf("guestlink config device add with a stray byte: %v %q, want %q", err, errOut, want)
	}

	// devlxd: the guest's declaration with a message that is not UTF-8.
	a := curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", "{\"state\":\"Degraded\",\"reason\":\"Broken\",\"message\":\"caf\xe9\"}")
	if want := "request body is not valid UTF-8 (byte offset 52)\n"; a.status != 400 || string(a.body) != want {
		t.Errorf("devlxd PATCH /1.0: %d %q, want 400 %q", a.status, a.body, want)
	}

	if after := snapshot(ctx, t, d); !reflect.DeepEqual(after, before) {
		t.Errorf("refused bodies changed the instances:\nbefore %v\nafter  %v", before, after)
	}
	if inst, err := d.client.Instance(ctx, name); err != nil || !reflect.DeepEqual(inst.Devices, devsBefore) {
		t.Errorf("refused bodies changed the devices: %v -> %v (%v)", devsBefore, inst.Devices, err)
	}

	// Valid multi-byte UTF-8, raw and escaped, is stored as sent.
	const text = "café 日本 🚀"
	if code, msg := adminDo(ctx, t, d, "PATCH", "/1.0/instances/utf8", `{"config":{"user.x":"`+text+`","user.y":"\ud83d\ude80\u00e9"}}`); code != 200 {
		t.Fatalf("PATCH with multi-byte UTF-8: %d %q", code, msg)
	}
	d.cli(ctx, "config", "set", name, "user.z="+text)
	inst, err = d.client.Instance(ctx, name)
	if err != nil || inst.Config["user.x"] != text || inst.Config["user.y"] != "🚀é" || inst.Config["user.z"] != text {
		t.Fatalf("stored user.x %q user.y %q user.z %q (%v), want %q, %q, %q", inst.Config["user.x"], inst.Config["user.y"], inst.Config["user.z"], err, text, "🚀é", text)
	}
}

// TestVolumeTooLargeAndServerErrors creates a 16TiB volume, the probe's
// 500 showing a host path: on a filesystem whose files stop short of
// 16TiB (ext4) it is a 400 saying so, with nothing stored. Then it forces
// a real internal error (the pool's volume directory replaced by a file):
// the 500's message names no path of the state directory but a request id
// under which the daemon's log has the full error, path included.
func TestVolumeTooLargeAndServerErrors(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	volDir := filepath.Join(d.stateDir, "storage-pools", "default", "custom")

	// Does this filesystem hold a 16TiB file? ext4 (4KiB blocks) does not.
	probe := filepath.Join(d.stateDir, "probe16t")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	efbig := errors.Is(os.Truncate(probe, 16<<40), syscall.EFBIG)
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := d.runCLI(ctx, "storage", "volume", "create", "default", "big", "size=16TiB")
	if efbig {
		if want := "Error: storage volume default/big: size 16TiB is more than a file on pool default's filesystem can hold: invalid argument"; err == nil || strings.TrimSpace(errOut) != want {
			t.Errorf("16TiB volume: %v %q\nwant %q", err, errOut, want)
		}
		code, msg := adminDo(ctx, t, d, "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"big","config":{"size":"16TiB"}}`)
		if code != 400 || strings.Contains(msg, d.stateDir) {
			t.Errorf("16TiB volume through the API: %d %q, want 400 without a path", code, msg)
		}
		if vols, err := d.client.StorageVolumes(ctx, "default"); err != nil || len(vols) != 0 {
			t.Errorf("the refused volume was stored: %v (%v)", vols, err)
		}
		if left, _ := os.ReadDir(volDir); len(left) != 0 {
			t.Errorf("the refused volume left files: %v", left)
		}
	} else {
		t.Logf("this filesystem holds a 16TiB sparse file: the volume is created")
		if err != nil {
			t.Errorf("16TiB volume on a filesystem that holds it: %v %q", err, errOut)
		}
		d.cli(ctx, "storage", "volume", "delete", "default", "big")
	}

	// A real internal error: the volume directory is a file now.
	moved := volDir + ".moved"
	if err := os.Rename(volDir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(volDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, msg := adminDo(ctx, t, d, "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"v2","config":{"size":"4MiB"}}`)
	m := regexp.MustCompile(`^creating storage volume default/v2: open <path>: not a directory \(request ([0-9a-f]{16}); the daemon's log has the detail\)$`).FindStringSubmatch(msg)
	if code != 500 || m == nil || strings.Contains(msg, d.stateDir) {
		t.Fatalf("volume create with the pool's directory a file: %d %q, want 500 without a path, with a request id", code, msg)
	}
	var logged bool
	for _, line := range strings.Split(d.log(), "\n") {
		if strings.Contains(line, m[1]) && strings.Contains(line, volDir+"/.creating-v2-") && strings.Contains(line, "not a directory") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("the daemon's log has no line with request id %s and the path under %s", m[1], volDir)
	}
	if err := os.Remove(volDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved, volDir); err != nil {
		t.Fatal(err)
	}
	if vols, err := d.client.StorageVolumes(ctx, "default"); err != nil || len(vols) != 0 {
		t.Errorf("the failed volume was stored: %v (%v)", vols, err)
	}
	d.cli(ctx, "storage", "volume", "create", "default", "v3", "size=4MiB")
}
