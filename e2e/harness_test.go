package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/internal/testwait"
)

// Timeouts of the end-to-end tests: generous, as the machine is loaded.
const (
	daemonStartTimeout = 60 * time.Second
	agentTimeout       = 60 * time.Second // launch until the agent is connected
	opTimeout          = 30 * time.Second // one API call or state change
	testTimeout        = 3 * time.Minute  // a whole test
	logTailLines       = 80
)

// daemonProc is a guestlinkd child process on a private state directory.
type daemonProc struct {
	t        *testing.T
	stateDir string
	extra    []string
	env      []string // added to cleanEnv for the daemon (newDaemonEnv)
	nofile   int      // the daemon's open-file limit (prlimit), 0: inherited
	logPath  string
	client   *client.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// newDaemon starts guestlinkd on a fresh state directory with extra flags.
// At the end of the test it deletes every instance (force), stops the
// daemon, kills and reports any process left behind by the state directory,
// and prints the daemon's log tail if the test failed.
func newDaemon(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	return newDaemonWith(t, nil, 0, extra...)
}

// newDaemonEnv is newDaemon with env ("KEY=value") added to the daemon's
// environment.
func newDaemonEnv(t *testing.T, env []string, extra ...string) *daemonProc {
	t.Helper()
	return newDaemonWith(t, env, 0, extra...)
}

// newDaemonNofile is newDaemon with the daemon's open-file limit, soft and
// hard, set to nofile (0: inherited), as `ulimit -n` would.
func newDaemonNofile(t *testing.T, nofile int, extra ...string) *daemonProc {
	t.Helper()
	return newDaemonWith(t, nil, nofile, extra...)
}

// newDaemonWith is newDaemon with env added to the daemon's environment
// and its open-file limit set to nofile (0: inherited).
func newDaemonWith(t *testing.T, env []string, nofile int, extra ...string) *daemonProc {
	t.Helper()
	binaries(t)
	// Unix socket paths are limited to 107 bytes: keep the state dir short.
	dir, err := os.MkdirTemp("", "gle2e-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{t: t, stateDir: dir, extra: extra, env: env, nofile: nofile, logPath: filepath.Join(dir, "daemon.log")}
	c, err := client.New(filepath.Join(dir, "guestlink.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d.client = c
	t.Cleanup(func() {
		d.cleanup()
		if t.Failed() {
			t.Logf("daemon log tail (%s):\n%s", d.logPath, d.logTail(logTailLines))
		}
		c.Close()
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	d.start()
	return d
}

// start runs the daemon and waits until its admin socket answers.
func (d *daemonProc) start() {
	t := d.t
	t.Helper()
	d.startAnswering()
	// The daemon answers while it recovers its guests (status Unknown);
	// tests that do not look at that wait for the recovery.
	ctx, cancel := context.WithTimeout(context.Background(), daemonStartTimeout)
	defer cancel()
	for {
		info, err := d.client.ServerInfo(ctx)
		if err == nil && info.Environment.Recovering == 0 && d.pluginsStarted(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("guestlinkd did not recover its guests within %v (%v); log tail:\n%s", daemonStartTimeout, err, d.logTail(logTailLines))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pluginsStarted reports whether every backend plugin has concluded its
// first start (running, or failed at least once): the daemon answers before
// its plugins run, and a fresh daemon has nothing to recover meanwhile.
func (d *daemonProc) pluginsStarted(ctx context.Context) bool {
	list, err := d.client.Backends(ctx)
	if err != nil {
		return false
	}
	for _, b := range list {
		if b.Health == "starting" {
			return false
		}
	}
	return true
}

// startAnswering starts the daemon and returns once it answers GET /1.0,
// its start-up recovery maybe still under way.
func (d *daemonProc) startAnswering() {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== test: starting guestlinkd at %s\n", time.Now().Format(time.RFC3339Nano))
	args := append([]string{"--state-dir", d.stateDir, "--plugin-dir", filepath.Join(binDir, "plugins")}, d.extra...)
	bin := filepath.Join(binDir, "guestlinkd")
	if d.nofile > 0 {
		// prlimit sets the limit and execs the daemon: the same process.
		prlimit, err := exec.LookPath("prlimit")
		if err != nil {
			logf.Close()
			t.Fatalf("a daemon with an open-file limit needs prlimit (util-linux): %v", err)
		}
		args = append([]string{fmt.Sprintf("--nofile=%d:%d", d.nofile, d.nofile), "--", bin}, args...)
		bin = prlimit
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(cleanEnv(), d.env...)
	// The daemon dies with the test binary (a -timeout panic runs no
	// cleanup); its plugins die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting guestlinkd: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), daemonStartTimeout)
	defer cancel()
	for {
		if _, err := d.client.ServerInfo(ctx); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("guestlinkd exited during start-up (%v); log tail:\n%s", cmd.ProcessState, d.logTail(logTailLines))
		case <-ctx.Done():
			t.Fatalf("guestlinkd did not answer within %v; log tail:\n%s", daemonStartTimeout, d.logTail(logTailLines))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cleanEnv is the test's environment without variables that would steer
// the daemon or its children elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GUESTLINK_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// pid returns the daemon's process id.
func (d *daemonProc) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid
}

// running reports whether the daemon process is alive.
func (d *daemonProc) running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the daemon and waits for it to exit.
func (d *daemonProc) signal(sig syscall.Signal, within time.Duration) error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(within):
		// A hung daemon: SIGQUIT makes the Go runtime write every
		// goroutine's stack to the log before it exits.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		return fmt.Errorf("guestlinkd did not exit within %v of %v; its goroutine dump is in %s", within, sig, d.logPath)
	}
}

// kill kills the daemon with SIGKILL.
func (d *daemonProc) kill() {
	d.t.Helper()
	if err := d.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		d.t.Fatal(err)
	}
}

// cleanup deletes every instance, stops the daemon and kills what is left.
func (d *daemonProc) cleanup() {
	t := d.t
	if d.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if list, err := d.client.Instances(ctx, client.InstanceFilter{}); err != nil {
			t.Errorf("cleanup: listing instances: %v", err)
		} else {
			for _, inst := range list {
				if err := d.client.Delete(ctx, inst.Name, true); err != nil {
					t.Errorf("cleanup: deleting %s: %v", inst.Name, err)
				}
			}
		}
		cancel()
		if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	// Plugins die with the daemon, VMMs with their guests' deletion; give
	// exiting processes a moment before calling them leftovers.
	var left []proc
	testwait.Until(15*time.Second, func() bool {
		left = procsUnder(d.stateDir)
		return len(left) == 0
	})
	for _, p := range left {
		t.Errorf("cleanup: process %d (%s) of state dir %s still running; killing it", p.pid, p.cmdline, d.stateDir)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// logTail returns the last n lines of the daemon's log.
func (d *daemonProc) logTail(n int) string {
	data, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", d.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// log returns the daemon's whole log.
func (d *daemonProc) log() string {
	data, _ := os.ReadFile(d.logPath)
	return string(data)
}

// cli runs the guestlink CLI against the daemon and returns its stdout; a
// non-zero exit fails the test with stderr.
func (d *daemonProc) cli(ctx context.Context, args ...string) string {
	d.t.Helper()
	out, errOut, err := d.runCLI(ctx, args...)
	if err != nil {
		d.t.Fatalf("guestlink %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// runCLI runs the guestlink CLI with GUESTLINK_STATE_DIR set.
func (d *daemonProc) runCLI(ctx context.Context, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), args...)
	cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}
