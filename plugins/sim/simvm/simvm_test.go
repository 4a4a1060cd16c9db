package simvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
)

// TestMain lets the test binary act as a VMM: Launch runs
// "<test binary> vmm <dir>".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		if os.Getenv(envNoInotify) != "" { // as with fs.inotify.max_user_instances exhausted
			inotifyInit = func() (int, error) { return -1, syscall.EMFILE }
		}
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestValidateFilePath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"agent.crt", true},
		{"sub/agent.conf", true},
		{"", false},
		{".", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"..", false},
		{"a/../../x", false},
		{"a//b", false},
		{"a/./b", false},
		{"a\x00b", false},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			err := ValidateFilePath(tc.path)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateFilePath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
			}
		})
	}
}

func TestLayoutPorts(t *testing.T) {
	tests := []struct {
		layout  Layout
		wired   string
		unwired []string
	}{
		{LayoutCurrent, PortCurrent, []string{PortLegacy}},
		{LayoutLegacy, PortLegacy, nil},
	}
	for _, tc := range tests {
		t.Run(string(tc.layout), func(t *testing.T) {
			w, u := tc.layout.Ports()
			if w != tc.wired || strings.Join(u, ",") != strings.Join(tc.unwired, ",") {
				t.Fatalf("Ports() = %q, %q", w, u)
			}
		})
	}
	if Layout("qemu").Valid() || !LayoutLegacy.Valid() {
		t.Fatal("Valid is wrong")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Command: "true", Layout: LayoutCurrent, RingSize: 16}
	tests := []struct {
		name   string
		change func(*Config)
		ok     bool
	}{
		{"good", func(*Config) {}, true},
		{"no command", func(c *Config) { c.Command = "" }, false},
		{"bad layout", func(c *Config) { c.Layout = "x" }, false},
		{"escaping file", func(c *Config) { c.Files = []File{{Path: "../agent.key"}} }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			err := c.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// vmmDir makes a short guest directory (Unix socket paths are limited).
func vmmDir(t *testing.T) Paths {
	t.Helper()
	dir, err := os.MkdirTemp("", "simvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Paths{Dir: dir}
}

// launch starts a VMM for cfg and returns its client and an open event
// subscription; the guest waits for cont.
func launch(t *testing.T, p Paths, cfg Config) (*Client, *Subscription) {
	t.Helper()
	if err := WriteConfig(p, &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := Launch(ctx, exe, p, os.Environ())
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	c := NewClient(p)
	vmmPIDs.Store(c, pid)
	t.Cleanup(func() {
		_ = c.Execute(context.Background(), CmdQuit, nil, nil)
		waitGone(t, c)
	})
	sub, err := c.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { sub.Close() })
	return c, sub
}

// vmmPIDs maps the clients launch returned to their VMM's pid.
var vmmPIDs sync.Map

// waitGone waits until c's VMM no longer answers and, when launch started
// it, until its process exited: only then is its guest directory lock
// released for a new VMM.
func waitGone(t *testing.T, c *Client) {
	t.Helper()
	testwait.For(t, "the vmm to end", 30*time.Second, func() bool {
		_, err := c.Status(context.Background())
		return errors.Is(err, ErrNotRunning)
	})
	if pid, ok := vmmPIDs.Load(c); ok {
		if err := testwait.ProcessExit(pid.(int), 30*time.Second); err != nil {
			t.Fatalf("vmm: %v", err)
		}
	}
}

// nextEvent returns the next event with the given name, skipping others.
func nextEvent(t *testing.T, sub *Subscription, name string) *Event {
	t.Helper()
	got := make(chan *Event, 1)
	go func() {
		for {
			ev, err := sub.Next()
			if err != nil {
				close(got)
				return
			}
			if ev.Event == name {
				got <- ev
				return
			}
		}
	}()
	select {
	case ev, ok := <-got:
		if !ok {
			t.Fatalf("subscription ended before %s", name)
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s event", name)
	}
	return nil
}

func cont(t *testing.T, c *Client) Status {
	t.Helper()
	var st Status
	if err := c.Execute(context.Background(), CmdCont, nil, &st); err != nil {
		t.Fatalf("cont: %v", err)
	}
	if st.State != StateRunning || st.GuestPID <= 0 || st.Boot != 1 {
		t.Fatalf("status after cont = %+v", st)
	}
	return st
}

func TestVMMRootRingAndExit(t *testing.T) {
	// A canary in the VMM's environment (the test's, which Launch is given)
	// must not reach the guest: its environment is built from nothing.
	t.Setenv("GUESTLINK_TEST_CANARY", "from-the-host")
	t.Setenv("GUESTLINK_CONFIG_DIR", "/nonexistent/cli-config")
	p := vmmDir(t)
	port := `"$GUESTLINK_ROOT/dev/virtio-ports/com.canonical.lxd"`
	cfg := Config{
		Name: "g1", UUID: "u-1", Layout: LayoutCurrent, RingSize: 16, Agent: "/opt/agent/guestlink-agent",
		Command: `env > "$GUESTLINK_ROOT/env"; printf 'STARTED\n' > ` + port + `; printf 'CONNECTED\n' > ` + port +
			`; read line < "$GUESTLINK_ROOT/go"; echo console-line; exit 3`,
		Files: []File{{Path: "agent.key", Mode: 0o600, Data: []byte("KEY")}, {Path: "agent.conf", Mode: 0o644, Data: []byte("{}")}},
	}
	if err := os.MkdirAll(filepath.Join(p.Root()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(p.Root(), "go"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, sub := launch(t, p, cfg)

	if fi, err := os.Stat(p.Control()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v", fi, err)
	}
	for _, f := range cfg.Files {
		fi, err := os.Stat(filepath.Join(p.ConfigDrive(), f.Path))
		if err != nil || fi.Mode().Perm() != os.FileMode(f.Mode) {
			t.Fatalf("config drive %s: %v %v", f.Path, fi, err)
		}
	}
	for _, port := range []string{PortCurrent, PortLegacy} {
		fi, err := os.Stat(p.Port(port))
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("port %s: %v %v", port, fi, err)
		}
	}
	// The unwired port has no reader: a non-blocking open for writing fails.
	if f, err := os.OpenFile(p.Port(PortLegacy), os.O_WRONLY|syscall.O_NONBLOCK, 0); !errors.Is(err, syscall.ENXIO) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("unwired port opened for writing: %v", err)
	}
	if err := c.Execute(context.Background(), CmdCont, []int{1}, nil); err != nil {
		t.Fatalf("cont: %v", err)
	}
	var ce *CommandError
	if err := c.Execute(context.Background(), CmdCont, nil, nil); !errors.As(err, &ce) || ce.Class != ClassWrongState {
		t.Fatalf("second cont = %v, want WrongState", err)
	}
	ev := nextEvent(t, sub, EventRingData)
	var rd RingData
	if err := json.Unmarshal(ev.Data, &rd); err != nil || rd.Port != PortCurrent || rd.Bytes <= 0 {
		t.Fatalf("RING_DATA %s: %v", ev.Data, err)
	}
	waitReceived(t, c, 18)
	if data, err := c.ReadRing(context.Background(), 4); err != nil || string(data) != "ARTE" {
		t.Fatalf("ringbuf-read 4 = %q, %v (the 16-byte ring must have dropped the oldest bytes)", data, err)
	}
	if data, err := c.ReadRing(context.Background(), 100); err != nil || string(data) != "D\nCONNECTED\n" {
		t.Fatalf("ringbuf-read 100 = %q, %v", data, err)
	}
	if data, err := c.ReadRing(context.Background(), 100); err != nil || len(data) != 0 || data == nil {
		t.Fatalf("empty ringbuf-read = %#v, %v", data, err)
	}
	if err := c.Execute(context.Background(), CmdRingbufRead, RingbufReadArgs{Size: 0}, nil); !errors.As(err, &ce) || ce.Class != ClassInvalidArgument {
		t.Fatalf("ringbuf-read size 0 = %v", err)
	}
	if err := c.Execute(context.Background(), "nope", nil, nil); !errors.As(err, &ce) || ce.Class != ClassCommandNotFound {
		t.Fatalf("unknown command = %v", err)
	}
	env, err := os.ReadFile(filepath.Join(p.Root(), "env"))
	if err != nil {
		t.Fatal(err)
	}
	// The guest's whole environment: the sim's variables, PATH, and what
	// the shell itself sets (PWD, SHLVL, _).
	want := map[string]string{
		"PATH": "/opt/agent:" + SystemPath, EnvRoot: p.Root(), EnvAgent: "/opt/agent/guestlink-agent", EnvInstance: "g1",
		EnvAgentRoot: p.Root(), EnvAgentLink: "hybrid:" + p.Link(), EnvAgentDevlxdSocket: p.DevlxdSocket(),
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PWD", "OLDPWD", "SHLVL", "_":
			continue
		}
		got[k] = v
	}
	if !maps.Equal(got, want) {
		t.Errorf("guest environment = %v, want exactly %v", got, want)
	}
	if strings.Contains(string(env), ReadyEnv) {
		t.Errorf("guest env leaks %s", ReadyEnv)
	}
	// Let the guest finish.
	if err := os.WriteFile(filepath.Join(p.Root(), "go"), []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, sub, EventExited)
	var rec ExitRecord
	if err := json.Unmarshal(ev.Data, &rec); err != nil || rec.Code != 3 || rec.Reason != ReasonGuest {
		t.Fatalf("EXITED %s: %v", ev.Data, err)
	}
	if _, err := sub.Next(); err == nil {
		t.Fatal("subscription still open after EXITED")
	}
	waitGone(t, c)
	if got, err := ReadExitRecord(p); err != nil || got.Status != "exit status 3" {
		t.Fatalf("exit record = %+v, %v", got, err)
	}
	if console, _ := os.ReadFile(p.Console()); !strings.Contains(string(console), "console-line") {
		t.Fatalf("console log = %q", console)
	}
}

func waitReceived(t *testing.T, c *Client, n uint64) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("the vmm to receive %d bytes", n), 60*time.Second, func() bool {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.RingReceived >= n
	})
}

func TestVMMResetPowerdownQuit(t *testing.T) {
	tests := []struct {
		name    string
		command string
		stop    string
		reason  string
		status  string
	}{
		{"powerdown", `echo boot >> "$GUESTLINK_ROOT/boots"; trap 'exit 7' TERM; while :; do sleep 0.05; done`, CmdPowerdown, ReasonPowerdown, "exit status 7"},
		{"quit", `echo boot >> "$GUESTLINK_ROOT/boots"; exec sleep 1000`, CmdQuit, ReasonQuit, "signal: killed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := vmmDir(t)
			c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutLegacy, RingSize: 64, Command: tc.command})
			first := cont(t, c)
			if _, err := os.Stat(p.Port(PortCurrent)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("legacy layout has %s: %v", PortCurrent, err)
			}
			waitLines(t, filepath.Join(p.Root(), "boots"), 1)
			if err := c.Execute(context.Background(), CmdSystemReset, nil, nil); err != nil {
				t.Fatal(err)
			}
			ev := nextEvent(t, sub, EventReset)
			var st Status
			if err := json.Unmarshal(ev.Data, &st); err != nil || st.Boot != 2 || st.GuestPID == first.GuestPID {
				t.Fatalf("RESET %s: %v", ev.Data, err)
			}
			waitLines(t, filepath.Join(p.Root(), "boots"), 2)
			if err := syscall.Kill(first.GuestPID, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("first boot's process %d still exists: %v", first.GuestPID, err)
			}
			if err := c.Execute(context.Background(), tc.stop, nil, nil); err != nil {
				t.Fatal(err)
			}
			ev = nextEvent(t, sub, EventExited)
			var rec ExitRecord
			if err := json.Unmarshal(ev.Data, &rec); err != nil || rec.Reason != tc.reason || rec.Status != tc.status || rec.Boot != 2 {
				t.Fatalf("EXITED %s: %v", ev.Data, err)
			}
			waitGone(t, c)
		})
	}
}

func waitLines(t *testing.T, name string, n int) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("%s to reach %d lines", name, n), 30*time.Second, func() bool {
		data, _ := os.ReadFile(name)
		return strings.Count(string(data), "\n") >= n
	})
}
