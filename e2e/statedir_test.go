package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite" // the stored row, read-only

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/internal/statelock"
)

// allPluginProcs returns the PIDs of every plugin process (any backend) of
// a state directory.
func allPluginProcs(stateDir string) []int {
	var pids []int
	for _, p := range findProcs(func(cmdline, environ string) bool {
		return strings.HasPrefix(cmdline, binDir+"/plugins/") && strings.Contains(environ, stateDir)
	}) {
		pids = append(pids, p.pid)
	}
	slices.Sort(pids)
	return pids
}

// fileState is what a file's bytes and times were.
type fileState struct {
	size  int64
	mtime time.Time
	sum   [32]byte
}

func (s fileState) String() string {
	return fmt.Sprintf("%d bytes, mtime %s, sha256 %x", s.size, s.mtime.Format(time.RFC3339Nano), s.sum[:8])
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{size: fi.Size(), mtime: fi.ModTime(), sum: sha256.Sum256(data)}
}

// storedConfig reads an instance's config from a SQLite state directory's
// database, read-only, as it is on disk (not through any daemon).
func storedConfig(ctx context.Context, t *testing.T, stateDir, name string) map[string]string {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, "guestlink.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var raw string
	if err := conn.QueryRowContext(ctx, "SELECT config FROM instances WHERE name = ?", name).Scan(&raw); err != nil {
		t.Fatalf("reading the stored row of %s: %v", name, err)
	}
	var config map[string]string
	if err := json.Unmarshal([]byte(raw), &config); err != nil {
		t.Fatalf("the stored config of %s: %v", name, err)
	}
	return config
}

// startSecond runs a second guestlinkd on stateDir with args, as the
// report did, and returns its output and error once it exited.
func startSecond(ctx context.Context, t *testing.T, stateDir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, daemonStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlinkd"),
		append([]string{"--state-dir", stateDir, "--plugin-dir", filepath.Join(binDir, "plugins")}, args...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second guestlinkd did not exit within %v:\n%s", daemonStartTimeout, out)
	}
	return string(out), err
}

// TestSecondDaemonRefused starts a second guestlinkd on the state directory
// of a live one whose guest is Ready (the report's `--https 0.0.0.0:8443`
// on a `make run` directory): it is refused, naming the live daemon's PID,
// before it opens anything. The live daemon's Ready flag is intact in
// memory and in the stored row, the database files' bytes and times are
// unchanged, no plugin process was started and the second daemon printed
// nothing but its refusal (no database, plugin or listener log line).
func TestSecondDaemonRefused(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "live1"
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	if got := storedConfig(ctx, t, d.stateDir, name)["volatile.last_state.ready"]; got != "true" {
		t.Fatalf("before the second daemon: stored volatile.last_state.ready = %q, want true", got)
	}
	lockFile := filepath.Join(d.stateDir, statelock.FileName)
	if data, err := os.ReadFile(lockFile); err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(d.pid()) {
		t.Errorf("lock file %s holds %q (%v); want the live daemon's PID %d", lockFile, data, err, d.pid())
	}
	dbFiles := []string{"guestlink.db", "guestlink.db-wal"}
	before := map[string]fileState{}
	for _, f := range dbFiles {
		before[f] = stateOf(t, filepath.Join(d.stateDir, f))
	}
	plugins := allPluginProcs(d.stateDir)
	if len(plugins) == 0 {
		t.Fatal("no plugin process of the live daemon found: the test cannot tell new ones")
	}

	out, err := startSecond(ctx, t, d.stateDir, "--https", freeAddr(t))
	if err == nil {
		t.Fatalf("the second guestlinkd exited 0; want a refusal. Output:\n%s", out)
	}
	want := fmt.Sprintf("state directory %s is in use by PID %d", d.stateDir, d.pid())
	if !strings.Contains(out, want) {
		t.Errorf("the refusal does not say %q:\n%s", want, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 {
		t.Errorf("the second daemon printed %d lines; want its refusal alone (it must open nothing):\n%s", len(lines), out)
	}

	if got := allPluginProcs(d.stateDir); !slices.Equal(got, plugins) {
		t.Errorf("plugin processes of the state dir: %v before, %v after the second daemon", plugins, got)
	}
	for _, f := range dbFiles {
		if after := stateOf(t, filepath.Join(d.stateDir, f)); after != before[f] {
			t.Errorf("%s changed: %v before, %v after the second daemon", f, before[f], after)
		}
	}
	if data, _ := os.ReadFile(lockFile); strings.TrimSpace(string(data)) != strconv.Itoa(d.pid()) {
		t.Errorf("lock file after the refusal holds %q; want the live daemon's PID %d", data, d.pid())
	}
	inst, err := d.client.Instance(ctx, name)
	if err != nil || inst.StatusCode != int(status.Ready) {
		t.Errorf("the live daemon's view of %s after the second daemon: %v, %v; want Ready", name, inst, err)
	}
	if got := storedConfig(ctx, t, d.stateDir, name)["volatile.last_state.ready"]; got != "true" {
		t.Errorf("after the second daemon: stored volatile.last_state.ready = %q, want true (memory and disk disagree)", got)
	}
	if strings.Contains(d.log(), "answers on this socket") || strings.Count(d.log(), "ready_cleared=") != 1 {
		t.Errorf("the live daemon's log shows a second start:\n%s", d.logTail(logTailLines))
	}
}

// TestKilledDaemonLeavesNoLock kills a daemon with SIGKILL while its guest
// runs (the guest's VMM and agent outlive it and must not hold the lock)
// and starts another on the same state directory: it starts, and the lock
// file names it.
func TestKilledDaemonLeavesNoLock(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g := d.launch(ctx, "kept1", nil, nil)
	vmm := vmmPID(t, g.dir)
	old := d.pid()

	d.kill()
	if !alive(vmm) {
		t.Fatalf("the guest's VMM %d died with the daemon; the test needs it alive", vmm)
	}
	d.start() // fails the test if the new daemon exits
	if d.pid() == old {
		t.Fatal("the daemon was not restarted")
	}
	data, err := os.ReadFile(filepath.Join(d.stateDir, statelock.FileName))
	if err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(d.pid()) {
		t.Errorf("lock file holds %q (%v); want the new daemon's PID %d", data, err, d.pid())
	}
}

// writeSecret writes value into a new file of the given mode.
func writeSecret(t *testing.T, value string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// procFile returns /proc/PID/name with its NULs as spaces.
func procFile(t *testing.T, pid int, name string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
}

// TestSecretsNotInArgv runs a cluster of two on PostgreSQL with the
// database URL and the join token given the ways that keep them out of ps:
// the first member reads the URL from --database-file, the second takes it
// from GUESTLINK_DATABASE_URL and its token from --join-file. Neither
// secret is on a daemon's command line (/proc/PID/cmdline, what ps shows
// every local user), and no plugin inherits the URL in its environment.
func TestSecretsNotInArgv(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	url := dbtest.PostgresURL(t)
	a := newDaemon(t, "--database-file", writeSecret(t, url, 0o600), "--name", "a", "--cluster-address", freeAddr(t),
		"--cluster-heartbeat", clusterHeartbeat, "--cluster-offline-after", clusterOffline)
	token := strings.TrimSpace(a.cli(ctx, "cluster", "add", "b"))
	b := newDaemonEnv(t, []string{"GUESTLINK_DATABASE_URL=" + url}, "--join-file", writeSecret(t, token, 0o400),
		"--name", "b", "--cluster-address", freeAddr(t), "--cluster-heartbeat", clusterHeartbeat, "--cluster-offline-after", clusterOffline)

	if list := b.cli(ctx, "cluster", "list"); !strings.Contains(list, "a ") || !strings.Contains(list, "b ") {
		t.Errorf("cluster list on b does not show both members:\n%s", list)
	}
	for _, d := range []*daemonProc{a, b} {
		cmdline := procFile(t, d.pid(), "cmdline")
		for what, secret := range map[string]string{"database URL": url, "join token": token} {
			if strings.Contains(cmdline, secret) {
				t.Errorf("the %s is on a daemon's command line: %s", what, cmdline)
			}
		}
		plugins := allPluginProcs(d.stateDir)
		if len(plugins) == 0 {
			t.Errorf("no plugin process of %s found", d.stateDir)
		}
		for _, pid := range plugins {
			if env := procFile(t, pid, "environ"); strings.Contains(env, url) || strings.Contains(env, "GUESTLINK_DATABASE_URL") {
				t.Errorf("plugin %d inherited the database URL: %s", pid, env)
			}
		}
		if strings.Contains(d.log(), "visible to every local user") {
			t.Errorf("a daemon given no secret on its command line warns about one:\n%s", d.logTail(logTailLines))
		}
	}
}

// TestSecretsRefused tries the unsafe or ambiguous ways of giving a
// secret: each is refused before the daemon opens anything, with a message
// that names the file and not the secret.
func TestSecretsRefused(t *testing.T) {
	t.Parallel()
	binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const secret = "sqlite:///tmp/s3cret-never-shown.db"
	readable := writeSecret(t, secret, 0o644)
	config := filepath.Join(t.TempDir(), "guestlinkd.yaml")
	if err := os.WriteFile(config, []byte("database: postgres://guestlink:s3cret@127.0.0.1:1/guestlink\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(config, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a world-readable database file", []string{"--database-file", readable}, "secret file " + readable + ": readable or writable by group or others (mode 0644): chmod 600"},
		{"a group-readable join file", []string{"--join-file", writeSecret(t, "glj_s3cret", 0o640)}, "readable or writable by group or others (mode 0640)"},
		{"both --database and --database-file", []string{"--database", "sqlite:///tmp/x.db", "--database-file", writeSecret(t, secret, 0o600)}, "--database and --database-file: give one"},
		{"a database password in a world-readable config file", []string{"--config", config}, "database holds a secret and the file is readable by others (mode 0644)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := refusedStart(ctx, t, tc.args...)
			if !strings.Contains(out, tc.want) || strings.Contains(out, "s3cret") {
				t.Errorf("refusal:\n%s\nwant it to say %q, without the secret", out, tc.want)
			}
		})
	}
}
