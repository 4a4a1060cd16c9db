package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client/cli"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// userConfig gives the test a configuration directory of its own found
// the way a user's is: GUESTLINK_CONFIG_DIR unset, XDG_CONFIG_HOME set.
// It returns the CLI's directory under it.
func userConfig(t *testing.T) string {
	t.Setenv(cli.EnvConfigDir, "")
	t.Setenv(cli.EnvStateDir, "")
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	return filepath.Join(xdg, "guestlink")
}

// execCLI runs guestlink with exactly args (no --state-dir added) and
// stdin.
func execCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	root := cli.NewRootCommand()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	code := 0
	if err := root.ExecuteContext(context.Background()); err != nil {
		errb.WriteString("Error: " + err.Error() + "\n")
		code = 1
	}
	return result{code, out.String(), errb.String()}
}

// TestStateDirBeatsSwitchedRemote switches to a remote (a second API over
// TCP with a bearer token), then checks which daemon each way of running a
// command reaches: an explicit --state-dir or GUESTLINK_STATE_DIR always
// means the local socket of that directory, --remote beats
// GUESTLINK_STATE_DIR and --state-dir, and remote switch local goes back. remote list marks the current remote.
func TestStateDirBeatsSwitchedRemote(t *testing.T) {
	cfgDir := userConfig(t)
	local := apitest.NewServer(t, apitest.Options{})
	remote := apitest.NewServer(t, apitest.Options{Auth: true})
	url := "http://" + remote.ServeTCP(t)
	tokenFile := filepath.Join(t.TempDir(), "x.token")
	if err := os.WriteFile(tokenFile, []byte(remote.BearerToken(t, "ci")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI := func(stdin string, args ...string) string {
		t.Helper()
		r := execCLI(t, stdin, args...)
		if r.code != 0 {
			t.Fatalf("guestlink %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		return r.stdout
	}
	mustCLI("", "--state-dir", local.Dir, "launch", "onlocal", "--backend", "sim")
	mustCLI("", "remote", "add", "x", url, "--token-file", tokenFile)
	mustCLI("", "--remote", "x", "launch", "onremote", "--backend", "sim")
	if out := mustCLI("", "remote", "switch", "x"); !strings.Contains(out, "remote switch local") {
		t.Errorf("remote switch x does not say how to switch back: %q", out)
	}
	if _, err := os.Stat(filepath.Join(cfgDir, cli.RemotesFile)); err != nil {
		t.Fatalf("the remotes are not under XDG_CONFIG_HOME: %v", err)
	}

	for _, tc := range []struct {
		name     string
		env      string // GUESTLINK_STATE_DIR
		args     []string
		want     string // the instance the list must show, "" for an error
		wantErr  string
		notWant  string
		listCurr string // remote list: the remote marked *
	}{
		{name: "switched remote by default", args: []string{"list"}, want: "onremote", notWant: "onlocal", listCurr: "x"},
		{name: "--state-dir beats the switch", args: []string{"--state-dir", local.Dir, "list"}, want: "onlocal", notWant: "onremote", listCurr: "local"},
		{name: "GUESTLINK_STATE_DIR beats the switch", env: local.Dir, args: []string{"list"}, want: "onlocal", notWant: "onremote", listCurr: "local"},
		{name: "--remote beats GUESTLINK_STATE_DIR", env: local.Dir, args: []string{"--remote", "x", "list"}, want: "onremote", notWant: "onlocal", listCurr: "x"},
		{name: "--remote local with --state-dir", args: []string{"--remote", "local", "--state-dir", local.Dir, "list"}, want: "onlocal", notWant: "onremote", listCurr: "local"},
		{name: "--remote beats --state-dir", args: []string{"--remote", "x", "--state-dir", local.Dir, "list"}, want: "onremote", notWant: "onlocal", listCurr: "x"},
		{name: "--remote of an unknown name", env: local.Dir, args: []string{"--remote", "y", "list"}, wantErr: `no remote "y": see guestlink remote list: not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cli.EnvStateDir, tc.env)
			r := execCLI(t, "", tc.args...)
			if tc.wantErr != "" {
				if r.code != 1 || r.stderr != "Error: "+tc.wantErr+"\n" {
					t.Fatalf("exit %d, stderr %q, want %q", r.code, r.stderr, tc.wantErr)
				}
				return
			}
			if r.code != 0 || !strings.Contains(r.stdout, tc.want) || strings.Contains(r.stdout, tc.notWant) {
				t.Fatalf("exit %d, stderr %q, stdout:\n%s\nwant %s and not %s", r.code, r.stderr, r.stdout, tc.want, tc.notWant)
			}
			// remote list, run the same way, marks the same daemon.
			listArgs := append(tc.args[:len(tc.args)-1:len(tc.args)-1], "--format", "json", "remote", "list")
			var items []struct {
				Name     string `json:"name"`
				Current  bool   `json:"current"`
				Switched bool   `json:"switched"`
			}
			if err := json.Unmarshal([]byte(mustCLI("", listArgs...)), &items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				if it.Current != (it.Name == tc.listCurr) || it.Switched != (it.Name == "x") {
					t.Errorf("remote list %v: %+v, want current %s, switched x", listArgs, it, tc.listCurr)
				}
			}
		})
	}

	// The table marks the current remote with * and the overridden switch.
	t.Setenv(cli.EnvStateDir, local.Dir)
	table := mustCLI("", "remote", "list")
	if !hasRow(table, "local", "*") || !hasRow(table, "x", "switched") {
		t.Errorf("remote list with %s set:\n%s", cli.EnvStateDir, table)
	}
	t.Setenv(cli.EnvStateDir, "")
	if table := mustCLI("", "remote", "list"); !hasRow(table, "x", "*") {
		t.Errorf("remote list after switch x:\n%s", table)
	}

	// Back to local: without a state directory there is nothing to reach.
	mustCLI("", "remote", "switch", "local")
	if r := execCLI(t, "", "list"); r.code != 1 || r.stderr != "Error: no state directory: give --state-dir DIR or set GUESTLINK_STATE_DIR\n" {
		t.Fatalf("list after switch local: exit %d, stderr %q", r.code, r.stderr)
	}
	if table := mustCLI("", "--state-dir", local.Dir, "remote", "list"); !hasRow(table, "local", "*") {
		t.Errorf("remote list after switch local:\n%s", table)
	}
}

// hasRow reports whether table has a row starting with name and ending
// with mark.
func hasRow(table, name, mark string) bool {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == name && f[len(f)-1] == mark {
			return true
		}
	}
	return false
}

// TestRemoteAddTokenSources adds the same remote with --token VALUE,
// --token-file PATH and --token - (stdin): each stores the same remote;
// only the argv form warns. Then the refusals: both flags, an empty or
// missing file, a token with spaces.
func TestRemoteAddTokenSources(t *testing.T) {
	cfgDir := userConfig(t)
	const token = "glb_0123456789abcdef"
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stored := func(name string) cli.Remote {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(cfgDir, cli.RemotesFile))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Remotes map[string]cli.Remote `json:"remotes"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Remotes[name]
	}
	for _, tc := range []struct {
		name, stdin string
		flags       []string
		warns       bool
	}{
		{"argv", "", []string{"--token", token}, true},
		{"file", "", []string{"--token-file", file}, false},
		{"stdin", token + "\nnot read\n", []string{"--token", "-"}, false},
		{"stdin without a newline", token, []string{"--token", "-"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "r-" + strings.ReplaceAll(tc.name, " ", "-")
			r := execCLI(t, tc.stdin, append([]string{"remote", "add", name, "http://127.0.0.1:1"}, tc.flags...)...)
			if r.code != 0 {
				t.Fatalf("remote add %v: exit %d, stderr %q", tc.flags, r.code, r.stderr)
			}
			if got := strings.Contains(r.stderr, "visible to every local user"); got != tc.warns {
				t.Errorf("remote add %v: warning %v, want %v (stderr %q)", tc.flags, got, tc.warns, r.stderr)
			}
			if got, want := stored(name), (cli.Remote{URL: "http://127.0.0.1:1", Token: token}); got != want {
				t.Errorf("remote add %v stored %+v, want %+v", tc.flags, got, want)
			}
		})
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(spaced, []byte("glb_a b\n"), 0o600)
	for _, tc := range []struct {
		name, stdin string
		flags       []string
		want        string
	}{
		{"both flags", "", []string{"--token", "t", "--token-file", file}, "give --token or --token-file, not both: invalid argument"},
		{"empty file", "", []string{"--token-file", empty}, "no token in " + empty + ": invalid argument"},
		{"missing file", "", []string{"--token-file", filepath.Join(dir, "nope")}, "reading the token: open " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"spaces", "", []string{"--token-file", spaced}, "the token in " + spaced + " holds spaces or control characters: invalid argument"},
		{"empty stdin", "", []string{"--token", "-"}, "no token in stdin: invalid argument"},
		{"no token over http", "", nil, "an http remote needs a token, --token-file PATH or --token - (client certificates need https): invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execCLI(t, tc.stdin, append([]string{"remote", "add", "bad", "http://127.0.0.1:1"}, tc.flags...)...)
			if r.code != 1 || r.stderr != "Error: "+tc.want+"\n" {
				t.Fatalf("exit %d, stderr %q, want %q", r.code, r.stderr, tc.want)
			}
		})
	}
}
