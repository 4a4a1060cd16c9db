package simvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	for _, want := range []string{
		EnvRoot + "=" + p.Root(), EnvLink + "=hybrid:" + p.Link(), EnvAgent + "=/opt/agent/guestlink-agent",
		EnvDevlxdSocket + "=" + p.DevlxdSocket(), EnvInstance + "=g1", "PATH=/opt/agent:",
	} {
		if !strings.Contains(string(env), "\n"+want) && !strings.HasPrefix(string(env), want) {
			t.Errorf("guest env lacks %q:\n%s", want, env)
		}
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

func TestVMMStartFailures(t *testing.T) {
	t.Run("bad config", func(t *testing.T) {
		p := vmmDir(t)
		if err := os.WriteFile(p.Config(), []byte(`{"command":"true","layout":"nope","ring_size":16}`), 0o600); err != nil {
			t.Fatal(err)
		}
		exe, _ := os.Executable()
		_, err := Launch(context.Background(), exe, p, os.Environ())
		if err == nil || !strings.Contains(err.Error(), "unknown layout") {
			t.Fatalf("Launch = %v, want the config error", err)
		}
		if rec, err := ReadExitRecord(p); err != nil || rec.Reason != ReasonError {
			t.Fatalf("exit record = %+v, %v", rec, err)
		}
	})
	t.Run("bad ring size", func(t *testing.T) {
		p := vmmDir(t)
		WriteConfig(p, &Config{Command: "true", Layout: LayoutCurrent, RingSize: 24})
		exe, _ := os.Executable()
		if _, err := Launch(context.Background(), exe, p, os.Environ()); err == nil || !strings.Contains(err.Error(), "power of two") {
			t.Fatalf("Launch = %v", err)
		}
	})
	t.Run("not a vmm binary", func(t *testing.T) {
		p := vmmDir(t)
		WriteConfig(p, &Config{Command: "true", Layout: LayoutCurrent, RingSize: 16})
		if _, err := Launch(context.Background(), "/bin/true", p, os.Environ()); err == nil {
			t.Fatal("Launch of /bin/true succeeded")
		}
	})
	t.Run("no vmm", func(t *testing.T) {
		p := vmmDir(t)
		if _, err := NewClient(p).Status(context.Background()); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Status = %v, want ErrNotRunning", err)
		}
	})
}

func TestVMMSigtermQuits(t *testing.T) {
	p := vmmDir(t)
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"})
	st := cont(t, c)
	if err := syscall.Kill(st.VMMPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub, EventExited)
	var rec ExitRecord
	if err := json.Unmarshal(ev.Data, &rec); err != nil || rec.Reason != ReasonQuit || !strings.Contains(rec.Message, "terminated") {
		t.Fatalf("EXITED %s: %v", ev.Data, err)
	}
	waitGone(t, c)
	if err := syscall.Kill(st.GuestPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("guest %d survived its vmm: %v", st.GuestPID, err)
	}
}

func TestSecondVMMRefused(t *testing.T) {
	p := vmmDir(t)
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"}
	c, _ := launch(t, p, cfg)
	st := cont(t, c)
	exe, _ := os.Executable()
	_, err := Launch(context.Background(), exe, p, os.Environ())
	if err == nil || !strings.Contains(err.Error(), ErrBusy.Error()) {
		t.Fatalf("second Launch = %v, want %v", err, ErrBusy)
	}
	got, err := c.Status(context.Background())
	if err != nil || got.VMMPID != st.VMMPID || got.State != StateRunning {
		t.Fatalf("first vmm after a refused second one: %+v, %v", got, err)
	}
	if _, err := ReadExitRecord(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused vmm wrote an exit record: %v", err)
	}
}

func TestPowerOffKillsEscapedProcesses(t *testing.T) {
	p := vmmDir(t)
	// The child leaves the guest's process group (setsid) but keeps its
	// environment; the guest command then exits.
	cmd := `setsid sleep 1000 & echo $! > "$GUESTLINK_ROOT/child"; while [ ! -s "$GUESTLINK_ROOT/child" ]; do :; done; exit 0`
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: cmd})
	cont(t, c)
	nextEvent(t, sub, EventExited)
	waitGone(t, c)
	data, err := os.ReadFile(filepath.Join(p.Root(), "child"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("guest pid %q: %v", data, err)
	}
	// Gone, or a zombie waiting for init.
	if err := testwait.ProcessExit(pid, 30*time.Second); err != nil {
		t.Fatalf("process %d escaped the guest's power-off: %v", pid, err)
	}
}

// envNoInotify makes the test binary's VMM fail to get an inotify instance.
const envNoInotify = "SIMVM_TEST_NO_INOTIFY"

// TestVMMWithoutInotify runs a VMM whose inotify instance cannot be had (the
// per-user limit reached): it must run, deliver ring data and its events,
// and say once in its log that port events are off.
func TestVMMWithoutInotify(t *testing.T) {
	t.Setenv(envNoInotify, "1")
	p := vmmDir(t)
	port := `"$GUESTLINK_ROOT/dev/virtio-ports/com.canonical.lxd"`
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 64,
		Command: `printf 'STARTED\n' > ` + port + `; exec sleep 1000`})
	cont(t, c)
	// The guest opened the port, wrote and closed it: the ring-data event
	// comes, and no port change before it.
	seen := make(chan []string, 1)
	go func() {
		var names []string
		for {
			ev, err := sub.Next()
			if err != nil {
				seen <- append(names, err.Error())
				return
			}
			names = append(names, ev.Event)
			if ev.Event == EventRingData {
				seen <- names
				return
			}
		}
	}()
	select {
	case names := <-seen:
		if names[len(names)-1] != EventRingData || slices.Contains(names, EventPortChange) {
			t.Fatalf("events %v, want %s and no %s", names, EventRingData, EventPortChange)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s event", EventRingData)
	}
	waitReceived(t, c, 8)
	if data, err := c.ReadRing(context.Background(), 100); err != nil || string(data) != "STARTED\n" {
		t.Fatalf("ringbuf-read = %q, %v", data, err)
	}
	logData, err := os.ReadFile(p.VMMLog())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logData), "running without port open/close events"); n != 1 {
		t.Fatalf("vmm log says %d times that port events are off, want once:\n%s", n, logData)
	}
}

func TestPortChangeEvents(t *testing.T) {
	p := vmmDir(t)
	c, sub := launch(t, p, Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 16, Command: "exec sleep 1000"})
	cont(t, c)
	f, err := os.OpenFile(p.Port(PortCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("STARTED\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, want := range []bool{true, false} {
		ev := nextEvent(t, sub, EventPortChange)
		var pc PortChange
		if err := json.Unmarshal(ev.Data, &pc); err != nil || pc.Port != PortCurrent || pc.Open != want {
			t.Fatalf("PORT_CHANGE %s, want open=%v: %v", ev.Data, want, err)
		}
	}
}

// TestConn checks the connection-keeping client: one connection for a
// series of commands, concurrent callers, and a fresh connection after the
// VMM restarted.
func TestConn(t *testing.T) {
	p := vmmDir(t)
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 4096, Command: "exec sleep 1000"}
	c, _ := launch(t, p, cfg)
	cont(t, c)
	conn := NewConn(p)
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()

	t.Run("kept", func(t *testing.T) {
		if _, err := conn.ReadRing(ctx, 16); err != nil {
			t.Fatal(err)
		}
		first := conn.idle
		for range 10 {
			if _, err := conn.ReadRing(ctx, 16); err != nil {
				t.Fatal(err)
			}
		}
		if first == nil || conn.idle != first {
			t.Fatalf("kept connection %p, then %p: want the same one", first, conn.idle)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		const n = 400
		want := strings.Repeat("x", n)
		f, err := os.OpenFile(p.Port(PortCurrent), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(want); err != nil {
			t.Fatal(err)
		}
		f.Close()
		waitReceived(t, c, n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got strings.Builder
		for range 8 {
			wg.Go(func() {
				for range n / 8 {
					data, err := conn.ReadRing(ctx, 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got.Write(data)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if got.String() != want {
			t.Fatalf("read %d bytes concurrently, want %d", got.Len(), n)
		}
	})
	t.Run("vmm restarted", func(t *testing.T) {
		if err := c.Execute(ctx, CmdQuit, nil, nil); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c)
		if _, err := NewConn(p).ReadRing(ctx, 16); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("ReadRing with the vmm gone = %v, want ErrNotRunning", err)
		}
		if conn.idle == nil {
			t.Fatal("no kept connection")
		}
		c2, _ := launch(t, p, cfg)
		cont(t, c2)
		if _, err := conn.ReadRing(ctx, 16); err != nil {
			t.Fatalf("ReadRing after the vmm restarted: %v", err)
		}
	})
}

// BenchmarkReadRing compares a ringbuf-read on a fresh connection (Client)
// with one on the kept connection (Conn).
func BenchmarkReadRing(b *testing.B) {
	p := Paths{Dir: b.TempDir()}
	cfg := Config{Name: "g", UUID: "u", Layout: LayoutCurrent, RingSize: 4096, Command: "exec sleep 1000"}
	if err := WriteConfig(p, &cfg); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Launch(ctx, exe, p, os.Environ()); err != nil {
		b.Fatal(err)
	}
	c := NewClient(p)
	defer func() {
		_ = c.Execute(ctx, CmdQuit, nil, nil)
		_ = WaitUnlocked(ctx, p)
	}()
	if err := c.Execute(ctx, CmdCont, nil, nil); err != nil {
		b.Fatal(err)
	}
	conn := NewConn(p)
	defer conn.Close()
	for _, r := range []struct {
		name string
		read func(context.Context, int) ([]byte, error)
	}{{"dial-per-read", c.ReadRing}, {"kept-connection", conn.ReadRing}} {
		b.Run(r.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := r.read(ctx, 16); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/read")
		})
	}
}
