package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/guestlink/guestlink/client/cli"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestMain(m *testing.M) {
	// The CLI's remotes live in its configuration directory: never the
	// user's own.
	dir, err := os.MkdirTemp("", "glcli-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv(cli.EnvConfigDir, dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

// run runs guestlink with args against srv.
func run(t *testing.T, srv *apitest.Server, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"--state-dir", srv.Dir}, args...)
	code := cli.Execute(context.Background(), full, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// ok runs guestlink and fails unless it succeeds silently on stderr.
func ok(t *testing.T, srv *apitest.Server, args ...string) string {
	t.Helper()
	r := run(t, srv, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("guestlink %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// fails runs guestlink and checks it fails with exactly one line
// "Error: want" on stderr and nothing on stdout.
func fails(t *testing.T, srv *apitest.Server, want string, args ...string) {
	t.Helper()
	r := run(t, srv, args...)
	if r.code != 1 || r.stderr != "Error: "+want+"\n" || r.stdout != "" {
		t.Fatalf("guestlink %s:\nexit %d stdout %q\nstderr %q\nwant stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, "Error: "+want+"\n")
	}
}

func TestLaunchAndConfig(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})

	out := ok(t, srv, "launch", "web1", "--backend", "sim", "-c", "user.a=1", "-c", "user.b=x=y", "--config", "user.empty=")
	if out != "Instance web1 launched on sim: Running\n" {
		t.Fatalf("launch output %q", out)
	}
	for key, want := range map[string]string{"user.a": "1", "user.b": "x=y", "user.empty": "", "user.none": ""} {
		if got := ok(t, srv, "config", "get", "web1", key); got != want+"\n" {
			t.Errorf("config get %s = %q, want %q", key, got, want+"\n")
		}
	}

	ok(t, srv, "config", "set", "web1", "user.c=3", "user.d=4")
	ok(t, srv, "config", "set", "web1", "user.e", "five words")
	ok(t, srv, "config", "unset", "web1", "user.a", "user.d")
	var cfg map[string]string
	if err := json.Unmarshal([]byte(ok(t, srv, "--format", "json", "config", "show", "web1")), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["user.c"] != "3" || cfg["user.e"] != "five words" || cfg["user.a"] != "" || cfg["user.d"] != "" {
		t.Fatalf("config after set/unset = %v", cfg)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed -c", []string{"launch", "x1", "--backend", "sim", "-c", "novalue"}, `invalid config "novalue": want key=value`},
		{"empty -c key", []string{"launch", "x1", "--backend", "sim", "-c", "=v"}, `invalid config "=v": want key=value`},
		{"duplicate -c key", []string{"launch", "x1", "--backend", "sim", "-c", "user.a=1", "-c", "user.a=2"}, `invalid config: key "user.a" given twice`},
		{"unknown backend", []string{"launch", "x1", "--backend", "vbox"}, `unknown backend "vbox": loaded backends are qemu, sim`},
		{"duplicate", []string{"launch", "web1", "--backend", "sim"}, `creating instance "web1": already exists`},
		{"unknown key", []string{"config", "set", "web1", "color=red"}, `updating instance "web1": unknown config key "color": invalid argument`},
		{"malformed set", []string{"config", "set", "web1", "user.x"}, `invalid config "user.x": want key=value`},
		{"set without pairs", []string{"config", "set", "web1"}, "guestlink config set takes at least 2 argument(s), got 1 (usage: guestlink config set NAME KEY=VALUE... | set NAME KEY VALUE [flags])"},
		{"malformed pair", []string{"config", "set", "web1", "user.x", "user.y", "z"}, `invalid config "user.x": want key=value`},
		{"get unknown instance", []string{"config", "get", "nope", "user.a"}, `instance "nope": not found`},
		{"config without subcommand", []string{"config"}, "missing config subcommand: get, set, unset or show"},
		{"unknown config subcommand", []string{"config", "del", "web1"}, `unknown config subcommand "del": use get, set, unset or show`},
		{"unknown command", []string{"lauch", "x"}, `unknown command "lauch" for "guestlink" Did you mean this? launch auth`},
		{"unset nothing", []string{"config", "unset", "web1"}, "guestlink config unset takes at least 2 argument(s), got 1 (usage: guestlink config unset NAME KEY... [flags])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { fails(t, srv, tt.want, tt.args...) })
	}
	if out := ok(t, srv, "list", "--format", "json"); strings.Count(out, `"name"`) != 1 {
		t.Fatalf("failed commands created instances: %s", out)
	}
}

func TestStateCommands(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	ok(t, srv, "launch", "a1", "--backend", "sim")
	ok(t, srv, "launch", "b1", "--backend", "sim")

	ok(t, srv, "stop", "a1", "b1", "--timeout", "1500ms", "--force")
	fails(t, srv, `stopping instance "a1": not running: conflict`, "stop", "a1")
	fails(t, srv, `invalid --timeout -1s: must not be negative`, "stop", "a1", "--timeout", "-1s")
	ok(t, srv, "start", "a1")
	fails(t, srv, `starting instance "a1": already running: conflict; starting instance "zz": not found`, "start", "a1", "b1", "zz")
	// The state flags reach the API (the test service has no stateful backend).
	fails(t, srv, `stopping instance "a1" statefully: not supported`, "stop", "a1", "--stateful")
	fails(t, srv, `starting instance "a1" without its saved state: not supported`, "start", "a1", "--stateless")
	// b1 was started although the others failed.
	if out := ok(t, srv, "list", "--status", "running", "--format", "json"); strings.Count(out, `"name"`) != 2 {
		t.Fatalf("running after partial start: %s", out)
	}

	out := ok(t, srv, "restart", "a1", "--format", "json")
	var states []map[string]any
	if err := json.Unmarshal([]byte(out), &states); err != nil {
		t.Fatalf("restart json %q: %v", out, err)
	}
	if len(states) != 1 || states[0]["status"] != "Running" || states[0]["boot"] != 3.0 {
		t.Fatalf("restart json = %v", states)
	}

	fails(t, srv, `deleting instance "a1": running, stop it first or force: conflict`, "delete", "a1")
	ok(t, srv, "delete", "a1", "b1", "--force")
	if out := ok(t, srv, "list"); out != "NAME  STATUS  IPV4  BACKEND  AGENT  LINK  BOOT  STARTED\n" {
		t.Fatalf("list after delete = %q", out)
	}
}

func TestStopAll(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	for _, name := range []string{"a1", "b1", "c1"} {
		ok(t, srv, "launch", name, "--backend", "sim")
	}
	ok(t, srv, "stop", "b1")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"reports each running instance", []string{"stop", "--all", "--force"}, "a1: Stopped\nc1: Stopped\n"},
		{"nothing left running", []string{"stop", "--all"}, "no running instances\n"},
		{"json", []string{"stop", "--all", "--format", "json"}, "[]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ok(t, srv, tt.args...); got != tt.want {
				t.Fatalf("guestlink %s = %q, want %q", strings.Join(tt.args, " "), got, tt.want)
			}
		})
	}
	fails(t, srv, "guestlink stop --all takes no instance names, got 1 (usage: guestlink stop NAME... | --all [flags])", "stop", "--all", "a1")
	fails(t, srv, "guestlink stop takes at least 1 argument(s), got 0 (usage: guestlink stop NAME... | --all [flags])", "stop")
	if out := ok(t, srv, "list", "--status", "running", "--format", "json"); out != "[]\n" {
		t.Fatalf("running after stop --all: %s", out)
	}
}

func TestListFormats(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	ok(t, srv, "launch", "web1", "--backend", "sim")
	ok(t, srv, "launch", "database-1", "--backend", "sim")
	ok(t, srv, "stop", "database-1")
	if err := srv.Instances.SetReady("web1"); err != nil {
		t.Fatal(err)
	}

	t.Run("table", func(t *testing.T) {
		lines := strings.Split(strings.TrimSuffix(ok(t, srv, "list"), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("table:\n%s", strings.Join(lines, "\n"))
		}
		// Columns are aligned: STATUS starts at the same offset everywhere.
		col := strings.Index(lines[0], "STATUS")
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) < 8 || strings.Index(l, f[1]) != col {
				t.Fatalf("misaligned table:\n%s", strings.Join(lines, "\n"))
			}
		}
		if f := strings.Fields(lines[1]); f[0] != "database-1" || f[1] != "Stopped" || f[2] != "-" || f[4] != "-" {
			t.Fatalf("row %q", lines[1])
		}
		if f := strings.Fields(lines[2]); f[0] != "web1" || f[1] != "Ready" || f[2] != "-" || f[4] != "connected" || f[5] != "hybrid" || f[6] != "1" {
			t.Fatalf("row %q", lines[2])
		}
	})

	t.Run("json", func(t *testing.T) {
		var list []map[string]any
		if err := json.Unmarshal([]byte(ok(t, srv, "list", "--format", "json", "--status", "Ready")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0]["name"] != "web1" || list[0]["status_code"] != 113.0 {
			t.Fatalf("json list = %v", list)
		}
	})

	t.Run("yaml", func(t *testing.T) {
		var list []map[string]any
		if err := yaml.Unmarshal([]byte(ok(t, srv, "list", "--format", "yaml", "--backend", "sim")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0]["name"] != "database-1" || list[1]["status_code"] != 113 || list[1]["backend"] != "sim" {
			t.Fatalf("yaml list = %v", list)
		}
	})

	t.Run("bad format", func(t *testing.T) {
		fails(t, srv, `invalid format "xml": must be table, json or yaml`, "list", "--format", "xml")
	})

	t.Run("bad status", func(t *testing.T) {
		fails(t, srv, `listing instances: parsing status "Asleep": unknown status name: invalid argument`, "list", "--status", "Asleep")
	})
}

func TestInfo(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	ok(t, srv, "launch", "web1", "--backend", "sim", "-c", "user.role=web")
	if err := srv.Instances.SetReady("web1"); err != nil {
		t.Fatal(err)
	}

	t.Run("json", func(t *testing.T) {
		out := ok(t, srv, "info", "web1", "--format", "json")
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&obj); err != nil {
			t.Fatal(err)
		}
		if dec.More() {
			t.Fatalf("more than one JSON value: %s", out)
		}
		for _, k := range []string{"name", "uuid", "status", "status_code", "backend", "config", "devices", "agent",
			"devlxd_socket", "link", "boot", "created_at", "started_at", "ready_at", "timeline"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("info json lacks %q", k)
			}
		}
		agent, _ := obj["agent"].(map[string]any)
		if agent["state"] != "connected" || agent["last_heartbeat"] == nil {
			t.Errorf("agent = %v", obj["agent"])
		}
		tl, _ := obj["timeline"].([]any)
		if obj["status"] != "Ready" || obj["status_code"] != 113.0 || obj["boot"] != 1.0 || len(tl) != 3 {
			t.Errorf("info = %s", out)
		}
		if cfg, _ := obj["config"].(map[string]any); cfg["user.role"] != "web" {
			t.Errorf("config = %v", obj["config"])
		}
	})

	t.Run("yaml", func(t *testing.T) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(ok(t, srv, "info", "web1", "--format", "yaml")), &obj); err != nil {
			t.Fatal(err)
		}
		if obj["name"] != "web1" || obj["status_code"] != 113 {
			t.Fatalf("yaml info = %v", obj)
		}
	})

	t.Run("table", func(t *testing.T) {
		out := ok(t, srv, "info", "web1")
		for _, want := range []string{"Name:", "web1", "Status:", "Ready (113)", "Agent:", "connected, last heartbeat",
			"Devlxd socket:", "Config:", "user.role:", "Timeline:", "TIME", "Stopped", "Running", "devlxd"} {
			if !strings.Contains(out, want) {
				t.Errorf("info table lacks %q:\n%s", want, out)
			}
		}
		// The timeline block is a table of its own: 7 columns.
		after := strings.SplitN(out, "Timeline:\n", 2)[1]
		lines := strings.Split(strings.TrimSuffix(after, "\n"), "\n")
		if len(lines) != 4 {
			t.Fatalf("timeline lines:\n%s", after)
		}
		col := strings.Index(lines[0], "KIND")
		for _, l := range lines[1:] {
			if strings.Index(l, strings.Fields(l)[3]) != col {
				t.Fatalf("misaligned timeline:\n%s", after)
			}
		}
	})

	t.Run("unknown", func(t *testing.T) {
		fails(t, srv, `instance "nope": not found`, "info", "nope")
	})
}

func TestBackends(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	lines := strings.Split(strings.TrimSuffix(ok(t, srv, "backends"), "\n"), "\n")
	want := []string{
		"NAME  HEALTH      VERSION  PID   RESTARTS  FAILURES  NEXT RETRY  CAPABILITIES    LAST ERROR",
		"qemu  restarting  0.1.0    -     2         0         -           stateful,vsock  plugin exited: signal: killed",
		"sim   healthy     0.1.0    4242  0         0         -           devlxd-socket   -",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("backends:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestStateDirEnv(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	t.Setenv(cli.EnvStateDir, srv.Dir)
	var out, errb bytes.Buffer
	if code := cli.Execute(context.Background(), []string{"backends", "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `"name": "sim"`) {
		t.Fatalf("output %s", out.String())
	}
	t.Setenv(cli.EnvStateDir, "")
	out.Reset()
	errb.Reset()
	if code := cli.Execute(context.Background(), []string{"list"}, &out, &errb); code != 1 ||
		errb.String() != "Error: no state directory: give --state-dir DIR or set GUESTLINK_STATE_DIR\n" {
		t.Fatalf("no state dir: exit %d, stderr %q", code, errb.String())
	}
	t.Setenv(cli.EnvStateDir, t.TempDir())
	out.Reset()
	errb.Reset()
	if code := cli.Execute(context.Background(), []string{"list"}, &out, &errb); code != 1 ||
		!strings.HasPrefix(errb.String(), "Error: GET /1.0/instances: daemon unavailable at ") || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("no daemon: exit %d, stderr %q", code, errb.String())
	}
}
