package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// userCLI runs the real CLI as a user whose configuration directory is
// found through XDG_CONFIG_HOME (GUESTLINK_* cleared), with env added.
func userCLI(ctx context.Context, xdg string, stdin string, env []string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), args...)
	cmd.Env = append(append(cleanEnv(), "XDG_CONFIG_HOME="+xdg), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestRemoteSwitchKeepsStateDirLocal is issue 23's item 5 as the user met
// it: after guestlink remote switch to a remote (here one that answers
// nothing, so reaching it fails), commands that name their state
// directory, by --state-dir or GUESTLINK_STATE_DIR, act on that local
// daemon, and make stop (scripts/stop.sh, run for real against the test's
// daemon) stops the local guests.
func TestRemoteSwitchKeepsStateDirLocal(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	xdg := t.TempDir()
	must := func(env []string, args ...string) string {
		t.Helper()
		out, errOut, err := userCLI(ctx, xdg, "", env, args...)
		if err != nil {
			t.Fatalf("guestlink %s (env %q): %v\nstderr: %s", strings.Join(args, " "), env, err, errOut)
		}
		return out
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("glb_unused\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(nil, "remote", "add", "away", "http://127.0.0.1:1", "--token-file", tokenFile)
	must(nil, "remote", "switch", "away")
	if _, errOut, err := userCLI(ctx, xdg, "", nil, "list"); err == nil || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("list after switching to an unreachable remote: %v, stderr %q (want a failure reaching it)", err, errOut)
	}

	stateEnv := []string{"GUESTLINK_STATE_DIR=" + d.stateDir}
	must(stateEnv, "launch", "here1", "--backend", "sim", "-c", "sim.command=exec sleep 600")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--state-dir", nil, []string{"--state-dir", d.stateDir, "list"}},
		{"GUESTLINK_STATE_DIR", stateEnv, []string{"list"}},
	} {
		if out := must(tc.env, tc.args...); !strings.Contains(out, "here1") {
			t.Errorf("%s after remote switch away: list lacks the local here1:\n%s", tc.name, out)
		}
	}
	var items []struct {
		Name     string `json:"name"`
		Current  bool   `json:"current"`
		Switched bool   `json:"switched"`
	}
	if err := json.Unmarshal([]byte(must(stateEnv, "remote", "list", "--format", "json")), &items); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(items) != "[{local true false} {away false true}]" {
		t.Errorf("remote list with GUESTLINK_STATE_DIR set after switch away = %v, want local current, away switched", items)
	}

	// make stop: the repository's scripts/stop.sh in a tree whose bin/ is
	// the test's binaries, on the daemon's state directory.
	script, err := os.ReadFile("../scripts/stop.sh")
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	os.Mkdir(filepath.Join(tree, "scripts"), 0o755)
	if err := os.WriteFile(filepath.Join(tree, "scripts", "stop.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binDir, filepath.Join(tree, "bin")); err != nil {
		t.Fatal(err)
	}
	stop := exec.CommandContext(ctx, filepath.Join(tree, "scripts", "stop.sh"))
	stop.Env = append(cleanEnv(), "XDG_CONFIG_HOME="+xdg, "STATE_DIR="+d.stateDir)
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("scripts/stop.sh after remote switch away: %v\n%s", err, out)
	}
	d.waitInstance(ctx, "here1", "stopped by make stop", opTimeout, func(i *api.Instance) bool { return i.Status == "Stopped" })
}

// TestRemoteTokenNotInArgv adds a remote with --token - and --token-file:
// while the CLI waits for the token on stdin, its command line (as every
// local user reads it in /proc/PID/cmdline, which ps shows) does not hold
// it; each stores the same remote as --token VALUE does.
func TestRemoteTokenNotInArgv(t *testing.T) {
	t.Parallel()
	binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	xdg := t.TempDir()
	const token = "glb_secret0123456789"
	const url = "http://127.0.0.1:1"

	// --token -: the token arrives on a pipe only after argv was read.
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "remote", "add", "viastdin", url, "--token", "-")
	cmd.Env = append(cleanEnv(), "XDG_CONFIG_HOME="+xdg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(argv, []byte(token)) || !bytes.Contains(argv, []byte("viastdin")) {
		t.Errorf("the CLI's command line is %q", argv)
	}
	fmt.Fprintln(stdin, token)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("remote add --token -: %v\n%s", err, errOut.String())
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"remote", "add", "viafile", url, "--token-file", tokenFile},
		{"remote", "add", "viaargv", url, "--token", token},
	} {
		if _, errOut, err := userCLI(ctx, xdg, "", nil, args...); err != nil {
			t.Fatalf("guestlink %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
	}
	data, err := os.ReadFile(filepath.Join(xdg, "guestlink", "remotes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Remotes map[string]struct{ URL, Token string } `json:"remotes"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	want := cfg.Remotes["viaargv"]
	if want.Token != token || want.URL != url {
		t.Fatalf("--token VALUE stored %+v", want)
	}
	for _, name := range []string{"viastdin", "viafile"} {
		if got := cfg.Remotes[name]; got != want {
			t.Errorf("remote %s stored %+v, want %+v as with --token VALUE", name, got, want)
		}
	}
}
