package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm"
)

// vsockdPID returns the pid of the vsock device process serving the guest
// whose directory is dir (0 if none).
func vsockdPID(t testing.TB, dir string) int {
	t.Helper()
	ps := findProcs(func(cmdline, _ string) bool {
		return strings.Contains(cmdline, "\x00"+qemuvm.VsockdCommand+"\x00") && strings.Contains(cmdline, dir+"/")
	})
	if len(ps) > 1 {
		t.Fatalf("want one vsock device for %s, found %v", dir, ps)
	}
	if len(ps) == 0 {
		return 0
	}
	return ps[0].pid
}

// TestQEMUUserVsock launches the busybox guest with qemu.vsock=user (no
// /dev/vhost-vsock needed): the agent inside uses AF_VSOCK through
// guestlink's own vhost-user-vsock device, the instance is CONNECTED and
// Ready with link vsock, the guest's devlxd GET goes through it, and a
// plugin SIGKILL and a daemon restart each end Ready and CONNECTED again
// (the restarted daemon reaches the agent's vsock listener to advertise).
// The device's counters, written when QEMU closes its socket, prove the
// traffic went through it.
func TestQEMUUserVsock(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*qemuTestTimeout)
	defer cancel()
	const plugin, name = "qemu", "vm-vsock"
	cfg := qemuConfig(img, "/1.0/meta-data", map[string]string{"user.meta-data": qemuUserMetaData, qemuvm.KeyVsock: qemuvm.VsockUser})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: plugin, Config: cfg, Start: true}); err != nil {
		t.Fatalf("launching %s: %v", name, err)
	}
	connectedReady := func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	}
	inst := d.waitInstance(ctx, name, "Ready and CONNECTED over vsock", qemuBootTimeout, connectedReady)
	if inst.Link != "vsock" || inst.Details["link"] != "vsock" || inst.Details["vsock"] != qemuvm.VsockUser {
		t.Fatalf("instance link %q, details %v; want vsock through the user device", inst.Link, inst.Details)
	}
	dir := filepath.Dir(inst.Details["console_log"])
	resp, body := consoleGet(ctx, t, inst.Details["console_log"], "/1.0/meta-data", qemuOpTimeout)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "instance-id: "+inst.UUID) {
		t.Errorf("the guest's GET /1.0/meta-data over vsock: %d %q", resp.StatusCode, body)
	}
	qpid, vpid := qemuPID(t, inst.UUID), vsockdPID(t, dir)
	if qpid == 0 || vpid == 0 {
		t.Fatalf("QEMU pid %d, vsock device pid %d: want both running", qpid, vpid)
	}

	// The plugin killed: QEMU and its device live on, the guest stays Ready.
	old := backendOf(ctx, t, d, plugin)
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var b api.Backend
	if !testwait.Until(qemuOpTimeout, func() bool {
		b = backendOf(ctx, t, d, plugin)
		return b.Restarts >= 1 && b.Health == string(pluginhost.HealthHealthy) && b.PID != old.PID && b.PID != 0
	}) {
		t.Fatalf("backend %s not restarted within %v: %+v", plugin, qemuOpTimeout, b)
	}
	if !alive(qpid) || !alive(vpid) {
		t.Fatalf("after the plugin's SIGKILL: QEMU alive %v, vsock device alive %v; want both", alive(qpid), alive(vpid))
	}
	d.waitInstance(ctx, name, "Ready and CONNECTED after the plugin restart", qemuOpTimeout, connectedReady)

	// The daemon restarted: it re-advertises to the agent through the
	// device (host to guest) and the agent connects back (guest to host).
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d.start()
	inst = d.waitInstance(ctx, name, "Ready and CONNECTED after the daemon restart", qemuOpTimeout, connectedReady)
	if inst.Link != "vsock" || qemuPID(t, inst.UUID) != qpid || vsockdPID(t, dir) != vpid {
		t.Fatalf("after the daemon restart: link %q, QEMU %d (was %d), device %d (was %d)", inst.Link, qemuPID(t, inst.UUID), qpid, vsockdPID(t, dir), vpid)
	}

	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatalf("stopping %s: %v", name, err)
	}
	waitGone(ctx, t, "the vsock device after QEMU stopped", func() bool { return !alive(vpid) })
	log, _ := os.ReadFile(filepath.Join(dir, "vsockd.log"))
	m := regexp.MustCompile(`QEMU closed its socket; (\d+) connections, (\d+) packets and (\d+) bytes from the guest`).FindSubmatch(log)
	if m == nil {
		t.Fatalf("the device logged no counters:\n%s", log)
	}
	conns, _ := strconv.Atoi(string(m[1]))
	bytesFrom, _ := strconv.Atoi(string(m[3]))
	// At least: the agent's link before and after the daemon restart, and
	// the daemon's advertisement into the guest.
	if conns < 3 || bytesFrom == 0 {
		t.Fatalf("the device carried %d connections, %d bytes from the guest; want the agent's traffic:\n%s", conns, bytesFrom, log)
	}
	t.Logf("vsock device: %s", strings.TrimSpace(string(log)))
}
