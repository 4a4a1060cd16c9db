package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// Timeouts of the QEMU tests: a guest boots under TCG on a loaded 2-core
// machine, so every wait is generous.
const (
	qemuBootTimeout = 3 * time.Minute // launch until the agent is connected
	qemuOpTimeout   = 90 * time.Second
	qemuTestTimeout = 6 * time.Minute
)

var (
	qemuPluginsOnce sync.Once
	qemuPluginsDir  string
	qemuPluginsErr  error
)

// qemuPlugins builds the qemu and qemu-legacy plugins into a plugin
// directory of their own (with its SHA256SUMS), apart from the sim tests'
// directory, and returns it.
func qemuPlugins(t testing.TB) string {
	t.Helper()
	qemuPluginsOnce.Do(func() {
		dir := filepath.Join(binDir, "qemu-plugins")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			qemuPluginsErr = fmt.Errorf("creating the QEMU plugin directory: %w", err)
			return
		}
		for _, p := range []string{"qemu", "qemu-legacy"} {
			if err := testbin.Install(testbin.Module+"/plugins/"+p, filepath.Join(dir, p)); err != nil {
				qemuPluginsErr = err
				return
			}
		}
		if err := pluginhost.WriteChecksums(dir); err != nil {
			qemuPluginsErr = fmt.Errorf("writing the QEMU plugin checksums: %w", err)
			return
		}
		qemuPluginsDir = dir
	})
	if qemuPluginsErr != nil {
		t.Fatal(qemuPluginsErr)
	}
	return qemuPluginsDir
}

// newQEMUDaemon skips t without QEMU or the guest image, else starts a
// guestlinkd whose plugins are qemu and qemu-legacy. Guest directories
// are under the daemon's state directory (the plugins' data dir), so the
// harness finds and reports QEMU processes left behind.
func newQEMUDaemon(t *testing.T) (*daemonProc, qemutest.Image) {
	t.Helper()
	img := qemutest.RequiresQEMU(t)
	if !img.HasAgent {
		testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	binaries(t)
	d := newDaemon(t, "--plugin-dir", qemuPlugins(t), "--default-backend", "qemu")
	return d, img
}

// qemuConfig is the config of a test guest: the image, auto acceleration
// (TCG where KVM does not work) and the kernel parameter that makes the
// guest GET path from /dev/lxd/sock once Ready.
func qemuConfig(img qemutest.Image, get string, extra map[string]string) map[string]string {
	c := map[string]string{
		"qemu.kernel": img.Kernel,
		"qemu.initrd": img.Initrd,
		"qemu.accel":  "auto",
	}
	if get != "" {
		c["qemu.append"] = "guestlink.get=" + get
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// qemuPID returns the pid of the QEMU process running the guest uuid (0 if
// none).
func qemuPID(t testing.TB, uuid string) int {
	t.Helper()
	ps := findProcs(func(cmdline, _ string) bool {
		exe := strings.SplitN(cmdline, "\x00", 2)[0]
		return filepath.Base(exe) == "qemu-system-x86_64" && strings.Contains(cmdline, uuid)
	})
	switch len(ps) {
	case 0:
		return 0
	case 1:
		return ps[0].pid
	}
	t.Fatalf("want one QEMU process for guest %s, found %v", uuid, ps)
	return 0
}

// backendOf returns the entry of GET /1.0/backends named name.
func backendOf(ctx context.Context, t testing.TB, d *daemonProc, name string) api.Backend {
	t.Helper()
	list, err := d.client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no backend %q in %+v", name, list)
	return api.Backend{}
}

// consoleGet waits until the guest's console log shows the answer to
// "GET path" its /init sent to /dev/lxd/sock (kernel parameter
// guestlink.get) and returns it as an HTTP response with its body.
func consoleGet(ctx context.Context, t testing.TB, consoleLog, path string, within time.Duration) (*http.Response, []byte) {
	t.Helper()
	prefix := "guestlink: GET " + path + " "
	var data []byte
	var rest string
	found := testwait.Until(within, func() bool {
		if ctx.Err() != nil {
			return false
		}
		data, _ = os.ReadFile(consoleLog)
		// Only complete lines: QEMU may have written part of the answer.
		lines := strings.Split(string(data), "\n")
		for _, line := range lines[:len(lines)-1] {
			var ok bool
			if rest, ok = strings.CutPrefix(strings.TrimRight(line, "\r"), prefix); ok {
				return true
			}
		}
		return false
	})
	if !found {
		t.Fatalf("no answer to GET %s on the guest console within %v; console:\n%s", path, within, tailString(string(data), 3000))
	}
	if rest == "failed" {
		t.Fatalf("the guest's GET %s failed; console:\n%s", path, tailString(string(data), 3000))
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		t.Fatalf("the guest's answer to GET %s is not base64 (%v): %q", path, err, rest)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("the guest's answer to GET %s is not HTTP (%v): %q", path, err, raw)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatalf("reading the body of the guest's answer to GET %s: %v", path, err)
	}
	return resp, body.Bytes()
}

// tailString returns the last n bytes of s.
func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// timelineSteps returns the timeline's entries of kind as "from>to" steps
// (state) or "to" (agent, ready), waiting up to within until want occurs in
// order: runtime changes reach the timeline just after their events.
func timelineSteps(ctx context.Context, t testing.TB, d *daemonProc, name, kind string, want []string, within time.Duration) ([]string, []api.TimelineEntry) {
	t.Helper()
	var steps []string
	var tl []api.TimelineEntry
	testwait.Until(within, func() bool {
		var err error
		if tl, err = d.client.Timeline(ctx, name, 0); err != nil {
			t.Fatalf("timeline of %s: %v", name, err)
		}
		steps = steps[:0]
		for _, e := range tl {
			if e.Kind != kind {
				continue
			}
			if kind == "state" {
				steps = append(steps, e.From+">"+e.To)
			} else {
				steps = append(steps, e.To)
			}
		}
		return inOrder(steps, want)
	})
	return steps, tl
}

// procTicks returns a process's user+system CPU time in clock ticks.
func procTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("process %d: malformed stat %q", pid, s)
	}
	// Fields after the command: state is field 3; utime and stime are 14, 15.
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short stat %q", pid, s)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("process %d: bad utime/stime in %q", pid, s)
	}
	return u + st, nil
}
