package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// Sizes of the list flood (TestListFlood).
const (
	floodInstances = 1000
	floodClients   = 1000
	// floodFor outlasts three agent heartbeats and three health checks
	// spread over two intervals: long enough for a starved daemon to
	// declare its agent lost or its plugin hung.
	floodFor = 25 * time.Second
)

// TestListFlood is the attack of issue 8: a thousand clients list a
// thousand instances (2 MB+ answers) as fast as they can for 25 s while a
// plugin and an agent run and state changes are made. The daemon answers
// what it can and refuses the excess with 503 and Retry-After; the plugin
// is not killed as hung, the agent is not declared lost, and every state
// change made during the flood has its timeline entry and its event.
func TestListFlood(t *testing.T) {
	d := newDaemon(t) // not parallel: the flood would starve the other tests
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	const name = "flood1"
	rec := d.record(name)
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	mark := rec.mark()

	const churn = "churn1"
	churnRec := d.record(churn)
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: churn, Backend: "sim", Config: map[string]string{"sim.command": "exec sleep 100000"}}); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{}
	for i := range 12 {
		cfg[fmt.Sprintf("user.k%02d", i)] = strings.Repeat("v", 150)
	}
	if err := benchCreate(ctx, d.client, "f", floodInstances, 16, cfg, false); err != nil {
		t.Fatal(err)
	}
	size := listSize(ctx, t, d)
	if size < 2<<20 {
		t.Fatalf("the list of %d instances is %d bytes, want 2 MB or more", floodInstances, size)
	}
	before := simBackend(ctx, t, d)

	// The flood.
	var ok200, refused, other atomic.Int64
	var badRefusal atomic.Value
	floodCtx, stopFlood := context.WithTimeout(ctx, floodFor)
	defer stopFlood()
	var wg sync.WaitGroup
	sock := filepath.Join(d.stateDir, "guestlink.sock")
	start := time.Now()
	for range floodClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := floodHTTPClient(sock)
			defer hc.CloseIdleConnections()
			for floodCtx.Err() == nil {
				code, retryAfter, errCode, err := getList(floodCtx, hc)
				switch {
				case err != nil:
					if floodCtx.Err() == nil {
						other.Add(1)
					}
				case code == http.StatusOK:
					ok200.Add(1)
				case code == http.StatusServiceUnavailable:
					refused.Add(1)
					if retryAfter == "" || errCode != http.StatusServiceUnavailable {
						badRefusal.Store(fmt.Sprintf("503 with Retry-After %q, envelope error_code %d", retryAfter, errCode))
					}
				default:
					other.Add(1)
				}
			}
		}()
	}

	// Meanwhile: state changes through the API, retried on 503 as a client
	// should, each with a timeline entry and an event.
	changes := 0
	var changeLatency time.Duration
	for floodCtx.Err() == nil {
		action := api.ActionStart
		if changes%2 == 1 {
			action = api.ActionStop
		}
		t0 := time.Now()
		err := retryBusy(ctx, func() error {
			_, err := d.client.SetState(ctx, churn, api.InstanceStatePut{Action: action, Timeout: 30, Force: true})
			return err
		})
		if err != nil {
			t.Fatalf("%s %s during the flood: %v", action, churn, err)
		}
		changeLatency = max(changeLatency, time.Since(t0))
		changes++
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("flood: %d clients for %v: %d lists answered (%d bytes each), %d refused with 503, %d other; %d state changes, the slowest %v",
		floodClients, took.Round(time.Millisecond), ok200.Load(), size, refused.Load(), other.Load(), changes, changeLatency.Round(time.Millisecond))

	if v := badRefusal.Load(); v != nil {
		t.Errorf("a refusal was not LXD's 503 with Retry-After: %v", v)
	}
	if ok200.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d answered, %d refused: want both (the excess refused)", ok200.Load(), refused.Load())
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d list requests failed otherwise than with 503", n)
	}
	after := simBackend(ctx, t, d)
	t.Logf("sim plugin: %d health checks skipped while the daemon was saturated", after.SkippedChecks)
	if after.PID != before.PID || after.Restarts != before.Restarts || after.Health != "healthy" {
		t.Errorf("the sim plugin was restarted during the flood: before %+v, after %+v", before, after)
	}
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Agent.State != api.AgentConnected || inst.StatusCode != int(status.Ready) {
		t.Errorf("%s after the flood: agent %q, status %s; want connected and Ready", name, inst.Agent.State, inst.Status)
	}
	if n := count(rec.since(mark), events.InstanceAgentLost); n > 0 {
		t.Errorf("the agent of %s was declared lost %d times during the flood: %v", name, n, rec.since(mark))
	}
	checkTimelineComplete(ctx, t, d, churnRec, churn, changes)
}

// checkTimelineComplete checks that every start and stop of name has both
// its lifecycle event and its timeline entry.
func checkTimelineComplete(ctx context.Context, t *testing.T, d *daemonProc, rec *recorder, name string, changes int) {
	t.Helper()
	starts, stops := (changes+1)/2, changes/2
	rec.wait(ctx, 0, events.InstanceStarted, starts, opTimeout)
	rec.wait(ctx, 0, events.InstanceStopped, stops, opTimeout)
	tl, err := d.client.Timeline(ctx, name, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var running, stopped int
	for _, e := range tl {
		switch {
		case e.Kind == "state" && e.To == status.PowerRunning:
			running++
		case e.Kind == "state" && e.To == status.PowerStopped && e.Detail != "created":
			stopped++
		case e.Kind == "timeline":
			t.Errorf("timeline of %s reports a loss: %+v", name, e)
		}
	}
	if running != starts || stopped != stops {
		t.Errorf("timeline of %s: %d running and %d stopped entries, want %d and %d (events: %d started, %d stopped)",
			name, running, stopped, starts, stops, count(rec.since(0), events.InstanceStarted), count(rec.since(0), events.InstanceStopped))
	}
}

// floodHTTPClient is an HTTP client with its own connection to the admin
// socket.
func floodHTTPClient(sock string) *http.Client {
	var dialer net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
	}}
}

// getList sends GET /1.0/instances?recursion=1 (full objects) and reads the whole answer; for an
// error answer it returns the envelope's error_code.
func getList(ctx context.Context, hc *http.Client) (code int, retryAfter string, errCode int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://guestlink/1.0/instances?recursion=1", nil)
	if err != nil {
		return 0, "", 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, "", 0, err
	}
	var env api.Response[any]
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return resp.StatusCode, "", 0, fmt.Errorf("decoding a %d answer: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), env.ErrorCode, nil
}

// listSize returns the size of the answer of GET /1.0/instances?recursion=1.
func listSize(ctx context.Context, t *testing.T, d *daemonProc) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://guestlink/1.0/instances?recursion=1", nil)
	hc := floodHTTPClient(filepath.Join(d.stateDir, "guestlink.sock"))
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /1.0/instances: %d, %v", resp.StatusCode, err)
	}
	return int(n)
}

// retryBusy runs op until it does not fail with 503 (the daemon is busy),
// backing off as a client should.
func retryBusy(ctx context.Context, op func() error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = 50*time.Millisecond, time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := op()
		var se *client.StatusError
		if err != nil && !(errors.As(err, &se) && se.Code == http.StatusServiceUnavailable) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(bo), backoff.WithMaxElapsedTime(2*time.Minute))
	return err
}

// TestSupervisorKilledSixTimes kills the sim plugin six times in a row (the
// old supervisor gave up after five): it comes back each time, its guest
// keeps running, and `guestlink backends restart sim` restarts it at once
// with its failure count reset.
func TestSupervisorKilledSixTimes(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "sup1"
	g := d.launch(ctx, name, nil, nil)
	vmm := vmmPID(t, g.dir)
	for i := 1; i <= 6; i++ {
		pid := simBackend(ctx, t, d).PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		b := waitBackend(ctx, t, d, fmt.Sprintf("restart %d", i), func(b api.Backend) bool {
			return b.Restarts == i && b.Health == "healthy" && b.PID != pid && b.PID != 0
		})
		if b.Failures != i || !strings.Contains(b.LastError, "exited") {
			t.Fatalf("after kill %d: %+v, want %d failures in a row and the exit as last error", i, b, i)
		}
	}
	out := d.cli(ctx, "backends", "restart", "sim")
	if !strings.HasPrefix(out, "Backend sim restarted: healthy, pid ") {
		t.Fatalf("guestlink backends restart sim: %q", out)
	}
	if b := simBackend(ctx, t, d); b.Restarts != 7 || b.Failures != 0 || b.NextRetryAt != nil || b.Health != "healthy" {
		t.Fatalf("after guestlink backends restart: %+v, want 7 restarts, failures reset", b)
	}
	if !alive(vmm) {
		t.Fatalf("the guest's VMM %d did not survive the plugin restarts", vmm)
	}
	d.waitInstance(ctx, name, "agent connected after the restarts", agentTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected && i.StatusCode == int(status.Running)
	})
	if _, _, err := d.runCLI(ctx, "backends", "restart", "vbox"); err == nil {
		t.Fatal("guestlink backends restart vbox succeeded")
	}
}

// waitBackend polls the sim backend's health until cond holds.
func waitBackend(ctx context.Context, t *testing.T, d *daemonProc, what string, cond func(api.Backend) bool) api.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for {
		b := simBackend(ctx, t, d)
		if cond(b) {
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sim backend: %s not reached within %v: %+v", what, opTimeout, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestUntrustedDirsRefused starts guestlinkd on directories another user
// could change: it refuses to start and says which path, why and the fix.
func TestUntrustedDirsRefused(t *testing.T) {
	t.Parallel()
	binaries(t)
	tests := []struct {
		name  string
		root  bool
		spoil func(t *testing.T, state, plugins string) string // returns the path the error must name
		want  []string
	}{
		{"world-writable plugin dir", false, func(t *testing.T, _, plugins string) string {
			return chmodT(t, plugins, 0o777)
		}, []string{"plugin directory", "writable by group and others", "fix: chmod go-w"}},
		{"group-writable SHA256SUMS", false, func(t *testing.T, _, plugins string) string {
			return chmodT(t, filepath.Join(plugins, pluginhost.SumsFile), 0o664)
		}, []string{"checksum file", "writable by its group", "fix: chmod go-w"}},
		{"other-writable plugin binary", false, func(t *testing.T, _, plugins string) string {
			return chmodT(t, filepath.Join(plugins, "sim"), 0o757)
		}, []string{"plugin binary", "writable by others", "fix: chmod go-w"}},
		{"group-writable state dir", false, func(t *testing.T, state, _ string) string {
			return chmodT(t, state, 0o770)
		}, []string{"state directory", "writable by its group", "fix: chmod go-w"}},
		{"state dir owned by another user", true, func(t *testing.T, state, _ string) string {
			return chownT(t, state, 65534)
		}, []string{"state directory", "owned by uid 65534", "fix: chown"}},
		{"plugin binary owned by another user", true, func(t *testing.T, _, plugins string) string {
			return chownT(t, filepath.Join(plugins, "sim"), 65534)
		}, []string{"plugin binary", "owned by uid 65534", "fix: chown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("needs root: gives a file to another user (uid 65534) with chown")
			}
			base := t.TempDir()
			state, plugins := filepath.Join(base, "state"), filepath.Join(base, "plugins")
			for _, dir := range []string{state, plugins} {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"sim", pluginhost.SumsFile} {
				copyFileT(t, filepath.Join(binDir, "plugins", f), filepath.Join(plugins, f))
			}
			path := tt.spoil(t, state, plugins)
			ctx, cancel := context.WithTimeout(context.Background(), daemonStartTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlinkd"), "--state-dir", state, "--plugin-dir", plugins)
			cmd.Env = cleanEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("guestlinkd on an untrusted directory: %v, want exit status 1; output:\n%s", err, out)
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not contain %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(filepath.Join(state, "guestlink.sock")); err == nil {
				t.Error("the daemon opened its admin socket")
			}
			if ps := procsUnder(base); len(ps) > 0 {
				t.Errorf("processes left behind: %v", ps)
			}
		})
	}
}

func chmodT(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func chownT(t *testing.T, path string, uid int) string {
	t.Helper()
	if err := os.Chown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
	return path
}

func copyFileT(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}
