package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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
	"github.com/guestlink/guestlink/link/hybrid"
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
// traffic went through it. Inside the guest, link/transport's own vsock
// test (TestVSockGuest, built with -tags guestvsock) runs against the host
// through the device: Parse("vsock"), Listen, Dial to CID 2, the CID
// lookup (checkGuestTransport).
func TestQEMUUserVsock(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*qemuTestTimeout)
	defer cancel()
	transportTest := buildGuestTransportTest(ctx, t) // while the guest boots
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
	checkGuestTransport(ctx, t, d, name, dir, transportTest)

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
	conns, bytesFrom, log := vsockdCounters(ctx, t, dir)
	// At least: the agent's link before and after the daemon restart, and
	// the daemon's advertisement into the guest.
	if conns < 3 || bytesFrom == 0 {
		t.Fatalf("the device carried %d connections, %d bytes from the guest; want the agent's traffic:\n%s", conns, bytesFrom, log)
	}
	t.Logf("vsock device: %s", log)
}

// vsockCountersRE matches the line the device process logs when QEMU
// closes its socket.
var vsockCountersRE = regexp.MustCompile(`QEMU closed its socket; (\d+) connections, (\d+) packets and (\d+) bytes from the guest`)

// vsockdCounters waits for the vsock device process of the guest in dir to
// end (its QEMU stopped) and returns the connections and the bytes from
// the guest it logged, with the log.
func vsockdCounters(ctx context.Context, t *testing.T, dir string) (conns, bytesFrom int, log string) {
	t.Helper()
	waitGone(ctx, t, "the vsock device after QEMU stopped", func() bool { return vsockdPID(t, dir) == 0 })
	b, _ := os.ReadFile(filepath.Join(dir, "vsockd.log"))
	m := vsockCountersRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("the device logged no counters:\n%s", b)
	}
	conns, _ = strconv.Atoi(string(m[1]))
	bytesFrom, _ = strconv.Atoi(string(m[3]))
	return conns, bytesFrom, strings.TrimSpace(string(b))
}

// buildGuestTransportTest starts building link/transport's test binary with
// the guestvsock tag (static, for the busybox guest) and returns a function
// that waits for it and returns its path.
func buildGuestTransportTest(ctx context.Context, t *testing.T) func() string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "transport.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "guestvsock", "-trimpath", "-o", bin, "./link/transport")
	cmd.Dir = filepath.Dir(wd)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	return func() string {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatalf("building link/transport's guest test: %v\n%s", err, out)
		}
		return bin
	}
}

// vsockGuestCIDRE matches the device's log line naming the guest's CID.
var vsockGuestCIDRE = regexp.MustCompile(`QEMU connected; guest CID (\d+),`)

// checkGuestTransport pushes link/transport's guest test into the guest,
// runs it through exec and plays its host side on the device's hybrid
// socket: the guest's Dial(2, port) arrives on <vsock.sock>_<port>, and
// the host's hybrid.Dial reaches the guest test's Listen.
func checkGuestTransport(ctx context.Context, t *testing.T, d *daemonProc, name, dir string, bin func() string) {
	t.Helper()
	const hostPort, guestPort = 52842, 52841 // guestPort: vsockTestPort of link/transport
	uds := filepath.Join(dir, "vsock.sock")
	log, _ := os.ReadFile(filepath.Join(dir, "vsockd.log"))
	m := vsockGuestCIDRE.FindSubmatch(log)
	if m == nil {
		t.Fatalf("the vsock device logged no guest CID:\n%s", log)
	}
	ln, err := net.Listen("unix", hybrid.HostPath(uds, hostPort))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d.cli(ctx, "file", "push", "--mode", "0755", bin(), name+"/tmp/transport.test")
	type result struct {
		out, errOut string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, err := d.runCLI(ctx, "exec", name, "--env", "GUESTLINK_TEST_VSOCK_HOST_PORT="+strconv.Itoa(hostPort),
			"--env", "GUESTLINK_TEST_VSOCK_CID="+string(m[1]), "--",
			"/tmp/transport.test", "-test.run", "^TestVSockGuest$", "-test.v", "-test.timeout", "2m")
		done <- result{out, errOut, err}
	}()
	failed := func(what string, err error) {
		t.Helper()
		ln.Close()
		r := <-done
		t.Fatalf("%s: %v; the guest test: %v\n%s%s", what, err, r.err, r.out, r.errOut)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	var c net.Conn
	select {
	case c = <-accepted:
	case r := <-done:
		t.Fatalf("the guest test ended before dialing the host: %v\n%s%s", r.err, r.out, r.errOut)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "guest "+string(m[1])+"\n" {
		c.Close()
		failed(fmt.Sprintf("the guest's line %q, want its CID %s", line, m[1]), err)
	}
	_, err = io.WriteString(c, "host ok\n")
	c.Close()
	if err != nil {
		failed("answering the guest", err)
	}
	gc, err := hybrid.Dial(ctx, uds, guestPort)
	if err != nil {
		failed("dialing the guest test's listener through the device", err)
	}
	defer gc.Close()
	if _, err := io.WriteString(gc, "from host\n"); err != nil {
		failed("writing to the guest", err)
	}
	if line, err := bufio.NewReader(gc).ReadString('\n'); err != nil || line != "echo from host\n" {
		failed(fmt.Sprintf("the guest's echo %q", line), err)
	}
	r := <-done
	if r.err != nil || !strings.Contains(r.out, "--- PASS: TestVSockGuest") {
		t.Fatalf("link/transport's TestVSockGuest in the guest: %v\n%s%s", r.err, r.out, r.errOut)
	}
	t.Logf("in the guest: %s", strings.TrimSpace(r.out))
}
