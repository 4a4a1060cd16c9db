package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm"
)

// Budgets of the Debian guest (TCG on a loaded 2-core machine).
const (
	debianBootTimeout = 10 * time.Minute
	debianStopTimeout = 2 * time.Minute
)

// debianImage returns bin/images/debian-12.img (make guest-image-debian).
func debianImage(t *testing.T) string {
	t.Helper()
	return builtImage(t, "GUESTLINK_DEBIAN_IMAGE", "debian-12.img", "the Debian 12 guest image", "make guest-image-debian")
}

// builtImage returns the guest image $env names, else bin/images/file of
// the repository (what make target builds); a missing file fails under
// CI=true and skips elsewhere, naming the target.
func builtImage(t *testing.T, env, file, what, target string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(filepath.Dir(wd), "bin", "images", file)
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Requires(t, what, "run "+target+" ("+err.Error()+")")
	}
	return p
}

// TestQEMUDebian boots the stock Debian 12 image with systemd and
// cloud-init: the agent package's udev rule starts the agent, cloud-init's
// LXD datasource reads /dev/lxd/sock, the user-data's runcmd declares
// Ready only after reading a user.* key with the expected value, the
// network is the static address of cloud-init.network-config, ssh works
// over the user NIC's forward to it, cloud-init reports no error, and a
// stop is graceful (the agent writes STOPPED). A qemu-legacy launch of the
// same image reaches Ready.
//
// The two guests split the paths: the qemu guest runs on guestlink's own
// vsock device (qemu.vsock=user, docs/vsock.md), so the stock image's agent
// package (udev rule, systemd unit, setup script) is checked on real
// AF_VSOCK: link vsock, the agent's listener and connections in the
// guest's ss --vsock, the device's counters; the qemu-legacy guest is the
// README's VM path exactly as written (no config), on whatever link auto
// picks.
func TestQEMUDebian(t *testing.T) {
	d, _ := newQEMUDaemon(t)
	disk := debianImage(t)
	for _, c := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(c); err != nil {
			testenv.Requires(t, c, "openssh-client")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 16*time.Minute)
	defer cancel()
	// With its recorded inputs as properties, as guestlink launch imports
	// it: requirements.memory and requirements.disk among them.
	props := map[string]string{}
	if b, err := os.ReadFile(strings.TrimSuffix(disk, ".img") + ".json"); err != nil || json.Unmarshal(b, &props) != nil {
		t.Fatalf("the image's debian-12.json: %v", err)
	}
	if props["requirements.memory"] != "1GiB" || props["requirements.disk"] != "2GiB" {
		t.Fatalf("debian-12.json records requirements.memory %q and requirements.disk %q, want 1GiB and 2GiB (the image's size)", props["requirements.memory"], props["requirements.disk"])
	}
	if _, err := d.client.ImportImage(ctx, api.ImagesPost{Path: disk, Alias: "debian-12", Properties: props}); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	// The image declares Ready on its own once up; this user-data switches
	// that off, so that Ready here proves the runcmd read user.token.
	userData := fmt.Sprintf(`#cloud-config
ssh_authorized_keys:
  - %s
write_files:
  - path: /etc/guestlink/ready.disabled
    content: ""
runcmd:
  - [sh, -c, 'v=$(curl -sf --unix-socket /dev/lxd/sock http://lxd/1.0/config/user.token); if [ "$v" = "s3cret" ]; then /usr/bin/guestlink-agent ready; else echo "guestlink-test: user.token is [$v]" > /dev/console; fi']
`, strings.TrimSpace(string(pub)))
	// The full guest's network comes from cloud-init.network-config (read
	// by cloud-init's LXD datasource through devlxd): a static address that
	// QEMU's DHCP would not give, which the ssh forward targets.
	const mac, staticIP = "00:16:3e:4c:0a:32", "10.0.2.50"
	networkConfig := fmt.Sprintf(`version: 2
ethernets:
  lan:
    match:
      macaddress: "%s"
    addresses: [%s/24]
    routes:
      - to: 0.0.0.0/0 # cloud-init 22.4 (bookworm) does not know "default"
        via: 10.0.2.2
    nameservers:
      addresses: [10.0.2.3]
`, mac, staticIP)

	for _, tc := range []struct {
		plugin string
		full   bool // ssh, cloud-init, stop and vsock checks (one VM does them)
	}{{"qemu", true}, {"qemu-legacy", false}} {
		// The qemu-legacy guest is launched as the README's VM path does,
		// through the CLI: no user-data, no memory key, no device. The
		// daemon raises its memory to the image's minimum, the default
		// profile gives it eth0 (a user NIC), the image declares Ready by
		// itself, and launch --wait ready returns 0.
		t.Run(tc.plugin, func(t *testing.T) {
			name := "deb-" + tc.plugin
			port := freePort(t)
			start := time.Now()
			ready := false
			t.Cleanup(func() { // before the daemon's cleanup: the guest is still there
				if !ready { // waitInstance ends the parent test: t.Failed() is not set here
					out, _, _ := d.runCLI(context.Background(), "console", name)
					if lines := strings.Split(out, "\n"); len(lines) > 80 {
						out = strings.Join(lines[len(lines)-80:], "\n")
					}
					t.Logf("%s's console, last lines:\n%s", name, out)
				}
			})
			if !tc.full {
				// qemu.cpus=2 only shortens the TCG boot.
				out, errOut, err := d.runCLI(ctx, "launch", "debian-12", name, "--backend", tc.plugin, "-c", "qemu.cpus=2",
					"--wait", "ready", "--timeout", debianBootTimeout.String())
				if err != nil {
					t.Fatalf("guestlink launch debian-12 %s --wait ready: %v\n%s%s\n%s", name, err, out, errOut, d.cli(ctx, "console", name))
				}
			}
			config := map[string]string{"qemu.accel": "auto", "qemu.cpus": "2"}
			if tc.full {
				config["qemu.memory"], config["user.token"], config["cloud-init.user-data"] = "1GiB", "s3cret", userData
				config["cloud-init.network-config"] = networkConfig
				config[qemuvm.KeyVsock] = qemuvm.VsockUser // the link on guestlink's own vsock device
				nic := map[string]string{"type": "nic", "nictype": "user", "hwaddr": mac, "hostfwd": fmt.Sprintf("tcp::%d-%s:22", port, staticIP)}
				_, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: tc.plugin, Image: "debian-12", Start: true,
					Config: config, Devices: map[string]map[string]string{"eth0": nic}})
				if err != nil {
					t.Fatalf("launching %s: %v", name, err)
				}
			}
			inst := d.waitInstance(ctx, name, "Ready", debianBootTimeout, func(i *api.Instance) bool {
				return i.StatusCode == int(status.Ready)
			})
			ready = true
			t.Logf("%s: Ready %v after launch (accel %s)", name, time.Since(start).Round(time.Millisecond), inst.Details["accel"])
			steps, tl := timelineSteps(ctx, t, d, name, "agent", []string{api.AgentStarted, api.AgentConnected}, qemuOpTimeout)
			if !inOrder(steps, []string{api.AgentStarted, api.AgentConnected}) {
				t.Errorf("agent steps %v", steps)
			}
			for _, e := range tl { // the figures of docs/performance.md
				if e.Kind == "agent" && inst.StartedAt != nil {
					t.Logf("%s: agent %s %v after the start", name, e.To, e.Time.Sub(*inst.StartedAt).Round(time.Millisecond))
				}
			}
			if inst.ReadyAt != nil && inst.StartedAt != nil {
				t.Logf("%s: Ready %v after the start", name, inst.ReadyAt.Sub(*inst.StartedAt).Round(time.Millisecond))
			}
			if fi, err := os.Stat(filepath.Join(filepath.Dir(inst.Details["console_log"]), "root.qcow2")); err == nil {
				t.Logf("%s: overlay %d bytes once Ready", name, fi.Size())
			}
			if tc.full && (inst.Link != "vsock" || inst.Details["link"] != "vsock" || inst.Details["vsock"] != qemuvm.VsockUser) {
				t.Errorf("instance link %q, details %v; want vsock through the user device", inst.Link, inst.Details)
			}
			if !tc.full {
				if inst.Details["vsock"] == qemuvm.VsockUser {
					t.Errorf("the README's path (no config) runs on the user vsock device: details %v", inst.Details)
				}
				if got := inst.Config["limits.memory"]; got != "1GiB" {
					t.Errorf("limits.memory %q, want the image's requirements.memory 1GiB", got)
				}
				// Through the agent (guestlink exec): boot finished clean
				// (network-online included) and eth0 of the default
				// profile has QEMU's DHCP address.
				if out, _, _ := d.runCLI(ctx, "exec", name, "--", "systemctl", "is-system-running", "--wait"); strings.TrimSpace(out) != "running" {
					failed, _, _ := d.runCLI(ctx, "exec", name, "--", "systemctl", "--failed", "--no-legend", "--plain")
					t.Errorf("systemctl is-system-running: %q (failed: %s)", strings.TrimSpace(out), failed)
				}
				if out := d.cli(ctx, "exec", name, "--", "ip", "-4", "-o", "addr", "show", "scope", "global"); !strings.Contains(out, " 10.0.2.15/24 ") {
					t.Errorf("the default profile's NIC has no 10.0.2.15/24 (QEMU's DHCP): %q", out)
				}
				// guestlink info shows the guest's OS and address.
				info := d.cli(ctx, "info", name)
				for _, want := range []string{"Debian GNU/Linux 12", "10.0.2.15"} {
					if !strings.Contains(info, want) {
						t.Errorf("guestlink info lacks %q:\n%s", want, info)
					}
				}
				if err := d.client.Delete(ctx, name, true); err != nil {
					t.Fatal(err)
				}
				return
			}
			ssh := func(cmd string) string {
				out, err := exec.CommandContext(ctx, "ssh", "-i", key, "-p", fmt.Sprint(port), "-o", "StrictHostKeyChecking=no",
					"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR",
					"debian@127.0.0.1", cmd).CombinedOutput()
				if err != nil {
					t.Fatalf("ssh %q: %v: %s", cmd, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			// ssh reached the static address: cloud-init applied the
			// network config; the address is the only one.
			if got := ssh("ip -4 -o addr show scope global"); !strings.Contains(got, " "+staticIP+"/24 ") || strings.Count(got, "\n") != 0 {
				t.Errorf("guest addresses %q, want only %s/24 from cloud-init.network-config", got, staticIP)
			}
			// Boot finished clean: nothing failed, wait-online included.
			if got := ssh("systemctl is-system-running --wait || true"); got != "running" {
				t.Errorf("systemctl is-system-running: %q (failed: %s)", got, ssh("systemctl --failed --no-legend --plain || true"))
			}
			// The user-data's switch held: the image's own Ready unit did not run.
			if got := ssh("systemctl show -P ConditionResult guestlink-ready.service"); got != "no" {
				t.Errorf("guestlink-ready.service's condition result %q, want no (switched off by /etc/guestlink/ready.disabled)", got)
			}
			if got := ssh("systemctl is-active guestlink-agent"); got != "active" {
				t.Errorf("guestlink-agent is %q", got)
			}
			if got := ssh("readlink /dev/virtio-ports/com.canonical.lxd"); !strings.HasPrefix(got, "../vport") {
				t.Errorf("udev link of com.canonical.lxd: %q", got)
			}
			checkDebianVsock(ctx, t, d, name, ssh)
			var result struct {
				V1 struct {
					Datasource string   `json:"datasource"`
					Errors     []string `json:"errors"`
				} `json:"v1"`
			}
			if got := ssh("cat /run/cloud-init/result.json"); json.Unmarshal([]byte(got), &result) != nil {
				t.Errorf("cloud-init's result.json: %s", got)
			} else if !strings.Contains(result.V1.Datasource, "DataSourceLXD") || len(result.V1.Errors) > 0 {
				// Every module ran cleanly (the locale module needs the
				// image's locales package).
				t.Errorf("cloud-init's datasource %q (want LXD), errors %q", result.V1.Datasource, result.V1.Errors)
			}
			// exec through the agent (issue 26), on the booted guest.
			checkExecStreams(ctx, t, d, name)
			checkExecPTY(ctx, t, d, name)
			checkFreezeSnapshot(ctx, t, d, name) // filesystem freeze around a snapshot (issue 26)
			stopStart := time.Now()
			if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Timeout: int(debianStopTimeout / time.Second)}); err != nil {
				t.Fatalf("stopping: %v", err)
			}
			d.waitInstance(ctx, name, "Stopped", debianStopTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Stopped) })
			t.Logf("%s: stopped %v after the request", name, time.Since(stopStart).Round(time.Millisecond))
			if steps, tl := timelineSteps(ctx, t, d, name, "agent", []string{api.AgentStopped}, qemuOpTimeout); !inOrder(steps, []string{api.AgentStopped}) {
				t.Errorf("no graceful agent stop (ring STOPPED) in the timeline: %v (%+v)", steps, tl)
			}
			conns, bytesFrom, log := vsockdCounters(ctx, t, filepath.Dir(inst.Details["console_log"]))
			// At least the agent's link to the daemon, the daemon's
			// advertisement and the exec checks' connections.
			if conns < 3 || bytesFrom == 0 {
				t.Errorf("the vsock device carried %d connections, %d bytes from the guest; want the agent's traffic:\n%s", conns, bytesFrom, log)
			}
			t.Logf("%s: vsock device: %s", name, log)
			if err := d.client.Delete(ctx, name, false); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkDebianVsock checks, in a Debian guest on qemu.vsock=user, that the
// agent package chose the vsock link, that the kernel's virtio vsock
// transport was loaded from the image's modules, that the agent started
// once (no restart waiting for the transport), and that AF_VSOCK carries
// the link: ss --vsock, run through the agent's exec (itself a connection
// over the link), shows the agent listening on 8443 and a connection of
// that port to the host (CID 2).
func checkDebianVsock(ctx context.Context, t *testing.T, d *daemonProc, name string, ssh func(string) string) {
	t.Helper()
	if got := ssh("cat /run/guestlink-agent/link"); got != "vsock" {
		t.Errorf("the agent's link (from guestlink.link= on the kernel command line): %q, want vsock", got)
	}
	if got := ssh("test -d /sys/module/vmw_vsock_virtio_transport && test -c /dev/vsock && echo loaded"); got != "loaded" {
		t.Errorf("vmw_vsock_virtio_transport not loaded or no /dev/vsock: %q (lsmod: %s)", got, ssh("lsmod | grep vsock || true"))
	}
	if got := ssh("systemctl show -P NRestarts guestlink-agent"); got != "0" {
		t.Errorf("guestlink-agent restarted %s times (journal: %s)", got, ssh("sudo journalctl -b -u guestlink-agent --no-pager | tail -n 20"))
	}
	out := d.cli(ctx, "exec", name, "--", "ss", "--vsock", "-a", "-n", "-H")
	var listening, toHost bool
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		local, peer := f[4], f[5]
		listening = listening || (f[1] == "LISTEN" && strings.HasSuffix(local, ":8443"))
		toHost = toHost || (f[1] == "ESTAB" && strings.HasSuffix(local, ":8443") && strings.HasPrefix(peer, "2:"))
	}
	if !listening || !toHost {
		t.Errorf("ss --vsock in the guest: agent listening on 8443 %v, a connection of 8443 to CID 2 %v; want both:\n%s", listening, toHost, out)
	}
}
