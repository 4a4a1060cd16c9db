package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// guest is a launched sim instance.
type guest struct {
	name   string
	dir    string // the sim guest directory
	root   string // its stand-in root
	socket string // its /dev/lxd/sock
}

// agentDir is the config drive directory with the agent's certificate,
// key and agent.conf.
func (g *guest) agentDir() string { return filepath.Join(g.root, "run", "guestlink-agent") }

// launch creates and starts a sim instance running the real agent and
// waits until the agent is connected.
func (d *daemonProc) launch(ctx context.Context, name string, config map[string]string, devices map[string]map[string]string) *guest {
	d.t.Helper()
	cctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	if _, err := d.client.Create(cctx, api.InstancesPost{Name: name, Backend: "sim", Config: config, Devices: devices, Start: true}); err != nil {
		d.t.Fatalf("launching %s: %v", name, err)
	}
	inst := d.waitInstance(ctx, name, "agent connected", agentTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected
	})
	g := &guest{name: name, dir: inst.Details["guest_dir"], socket: inst.DevlxdSocket}
	if g.dir == "" || g.socket == "" {
		d.t.Fatalf("instance %s has no guest_dir or devlxd_socket: %+v", name, inst.Details)
	}
	g.root = filepath.Join(g.dir, "rootfs")
	return g
}

// waitInstance polls the instance until cond holds, failing the test with
// the last view after within.
func (d *daemonProc) waitInstance(ctx context.Context, name, what string, within time.Duration, cond func(*api.Instance) bool) *api.Instance {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *api.Instance
	var lastErr error
	for {
		inst, err := d.client.Instance(ctx, name)
		if err == nil {
			last = inst
			if cond(inst) {
				return inst
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				d.t.Fatalf("instance %s: %s not reached within %v: status %s, agent %q, config %v (last error %v)",
					name, what, within, last.Status, last.Agent.State, last.Config, lastErr)
			}
			d.t.Fatalf("instance %s: %s not reached within %v: %v", name, what, within, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// agentCommand runs `guestlink-agent <args>` as software in the guest would,
// pointed at the guest's devlxd socket.
func agentCommand(ctx context.Context, t *testing.T, g *guest, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink-agent"), args...)
	cmd.Env = append(cleanEnv(), "GUESTLINK_AGENT_DEVLXD_SOCKET="+g.socket)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("guestlink-agent %s in %s: %v: %s", strings.Join(args, " "), g.name, err, out)
	}
}

// devlxdAnswer is one answer of the guest's devlxd socket.
type devlxdAnswer struct {
	status      int
	contentType string
	body        []byte
}

// curlDevlxd sends one request to the guest's /dev/lxd/sock with curl and
// returns the answer byte for byte; headers are "Name: value" lines to send.
func curlDevlxd(ctx context.Context, t *testing.T, socket, method, path, body string, headers ...string) devlxdAnswer {
	t.Helper()
	bodyFile := filepath.Join(t.TempDir(), "body")
	args := []string{"-sS", "--max-time", "20", "--unix-socket", socket, "-X", method,
		"-o", bodyFile, "-w", "%{http_code}\n%{content_type}", "http://lxd" + path}
	if body != "" {
		args = append(args, "--data-binary", body)
	}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	out, err := exec.CommandContext(ctx, "curl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s %s: %v: %s", method, path, err, out)
	}
	code, ctype, _ := strings.Cut(string(out), "\n")
	status, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("curl %s %s: status %q: %v", method, path, code, err)
	}
	data, err := os.ReadFile(bodyFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return devlxdAnswer{status: status, contentType: ctype, body: data}
}
