package pluginhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/core/errdefs"
	"github.com/guestlink/guestlink/core/pluginhost"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// pluginBin is the SDK's test plugin, built by TestMain.
var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pluginhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "misbehaving")
	cmd := exec.Command("go", "build", "-o", pluginBin, "github.com/guestlink/guestlink/plugins/sdk/internal/misbehaving")
	cmd.Stderr = os.Stderr
	code := 1
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building test plugin:", err)
	} else {
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// pluginDir makes a plugin directory with the test plugin under each name,
// their behaviour files (nil: behave) and a SHA256SUMS for all of them. It
// returns the directory and the behaviour directory.
func pluginDir(t *testing.T, plugins map[string]map[string]any) (string, string) {
	t.Helper()
	dir, bdir := t.TempDir(), t.TempDir()
	for name, b := range plugins {
		copyFile(t, pluginBin, filepath.Join(dir, name))
		setBehaviour(t, bdir, name, b)
	}
	if err := pluginhost.WriteChecksums(dir); err != nil {
		t.Fatalf("WriteChecksums: %v", err)
	}
	return dir, bdir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func setBehaviour(t *testing.T, bdir, name string, b map[string]any) {
	t.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, name+".json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testConfig is a Config with short timings for tests.
func testConfig(dir, bdir string) pluginhost.Config {
	return pluginhost.Config{
		Dir:            dir,
		Logger:         hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Warn, Output: os.Stderr}),
		StartTimeout:   20 * time.Second,
		CallTimeout:    10 * time.Second,
		HealthInterval: 200 * time.Millisecond,
		HealthTimeout:  2 * time.Second,
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		StableAfter:    time.Minute,
		Env:            []string{"MISBEHAVING_BEHAVIOUR_DIR=" + bdir},
	}
}

func startHost(t *testing.T, cfg pluginhost.Config) *pluginhost.Host {
	t.Helper()
	h := pluginhost.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func status(h *pluginhost.Host, name string) pluginhost.Status {
	for _, st := range h.List() {
		if st.Name == name {
			return st
		}
	}
	return pluginhost.Status{}
}

// waitFor waits until cond holds (plugin processes and the supervisor
// announce nothing to the test) or a minute passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, time.Minute, cond)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// killGuest makes sure a guest process started by a test ends.
func killGuest(t *testing.T, st *sdk.GuestState) {
	t.Cleanup(func() {
		if st != nil && st.PID > 0 {
			syscall.Kill(-int(st.PID), syscall.SIGKILL)
		}
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDiscovery(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": {"version": "1.2.3"}, "badsum": nil})
	copyFile(t, pluginBin, filepath.Join(dir, "nosum")) // after SHA256SUMS was written
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "badsum"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("tampered"))
	f.Close()

	h := startHost(t, testConfig(dir, bdir))
	list := h.List()
	var names []string
	for _, st := range list {
		names = append(names, st.Name)
	}
	if want := []string{"badsum", "good", "nosum"}; !slices.Equal(names, want) {
		t.Fatalf("List names = %v, want %v", names, want)
	}
	tests := []struct {
		name     string
		health   pluginhost.Health
		errText  string
		wantsPID bool
	}{
		{"good", pluginhost.HealthHealthy, "", true},
		{"badsum", pluginhost.HealthRejected, "SHA256SUMS says sha256", false},
		{"nosum", pluginhost.HealthRejected, `no checksum for "nosum"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status(h, tt.name)
			if st.Health != tt.health || !strings.Contains(st.LastError, tt.errText) || (st.PID > 0) != tt.wantsPID {
				t.Fatalf("status = %+v, want health %s, error with %q", st, tt.health, tt.errText)
			}
			if st.Path != filepath.Join(dir, tt.name) {
				t.Fatalf("Path = %q", st.Path)
			}
			_, err := h.Backend(tt.name)
			if tt.health == pluginhost.HealthRejected && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("Backend(rejected) = %v, want ErrUnavailable", err)
			}
		})
	}
	if st := status(h, "good"); st.Version != "1.2.3" || !slices.Contains(st.Capabilities, sdk.CapRecover) {
		t.Fatalf("good: version %q, capabilities %v", st.Version, st.Capabilities)
	}
	_, err = h.Backend("nope")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "badsum, good, nosum") {
		t.Fatalf("Backend(nope) = %v, want ErrNotFound listing the backends", err)
	}
}

func TestNoChecksumFile(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": nil})
	os.Remove(filepath.Join(dir, pluginhost.SumsFile))
	h := startHost(t, testConfig(dir, bdir))
	if st := status(h, "good"); st.Health != pluginhost.HealthRejected || !strings.Contains(st.LastError, "no usable SHA256SUMS") {
		t.Fatalf("status = %+v, want rejected for the missing SHA256SUMS", st)
	}
}

func TestMissingDir(t *testing.T) {
	h := pluginhost.New(pluginhost.Config{Dir: filepath.Join(t.TempDir(), "none")})
	defer h.Close()
	if err := h.Start(context.Background()); err == nil {
		t.Fatal("Start on a missing directory succeeded")
	}
}

func TestReadChecksums(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		content string
		want    []string // names, sorted
		wantErr bool
	}{
		{"text mode", sum + "  sim\n", []string{"sim"}, false},
		{"binary mode", sum + " *qemu\n", []string{"qemu"}, false},
		{"comments and blanks", "# made by make\n\n" + sum + "  sim\n", []string{"sim"}, false},
		{"short sum", "abcd  sim\n", nil, true},
		{"not hex", strings.Repeat("zz", 32) + "  sim\n", nil, true},
		{"one space", sum + " sim\n", nil, true},
		{"path", sum + "  ../sim\n", nil, true},
		{"no name", sum + "\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), pluginhost.SumsFile)
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			sums, err := pluginhost.ReadChecksums(path)
			if tt.wantErr {
				if !errors.Is(err, pluginhost.ErrChecksum) {
					t.Fatalf("ReadChecksums = %v, want ErrChecksum", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range sums {
				names = append(names, n)
			}
			slices.Sort(names)
			if !slices.Equal(names, tt.want) {
				t.Fatalf("names = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestCallsAndErrorKinds(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": nil})
	h := startHost(t, testConfig(dir, bdir))
	b, err := h.Backend("good")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	spec := &sdk.GuestSpec{Name: "g1", UUID: "uuid-calls"}
	hd, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	hd, st, err := b.Start(ctx, hd, spec)
	killGuest(t, st)
	if err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("Start = %+v, %v", st, err)
	}
	tests := []struct {
		name string
		call func() error
		core error
		sdk  error
	}{
		{"invalid config", func() error {
			_, err := b.Create(ctx, &sdk.GuestSpec{Name: "g2", UUID: "u2", Config: map[string]string{"example.bogus": "1"}})
			return err
		}, errdefs.ErrInvalid, sdk.ErrInvalid},
		{"start running", func() error { _, _, err := b.Start(ctx, hd, spec); return err }, errdefs.ErrConflict, sdk.ErrConflict},
		{"delete running", func() error { return b.Delete(ctx, hd) }, errdefs.ErrConflict, sdk.ErrConflict},
		{"garbage handle", func() error { _, err := b.State(ctx, sdk.Handle("\x00garbage")); return err }, errdefs.ErrInvalid, sdk.ErrInvalid},
		{"link kind not announced", func() error {
			setBehaviour(t, bdir, "good", map[string]any{"link_kind": "vsock"})
			defer setBehaviour(t, bdir, "good", nil)
			_, err := b.LinkEndpoint(ctx, hd)
			return err
		}, errdefs.ErrInvalid, sdk.ErrInvalid},
		{"stateful stop", func() error {
			_, err := b.Stop(ctx, hd, sdk.StopOptions{Stateful: true})
			return err
		}, errdefs.ErrNotSupported, sdk.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.core) || !errors.Is(err, tt.sdk) {
				t.Fatalf("error %v does not match %v and sdk's %v", err, tt.core, tt.sdk)
			}
			if !strings.HasPrefix(err.Error(), `backend "good": `) {
				t.Fatalf("error %q does not name the backend", err)
			}
		})
	}
	if st, err := b.Stop(ctx, hd, sdk.StopOptions{Timeout: 10 * time.Second}); err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
	if err := b.Delete(ctx, hd); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// recorder collects OnEvent and OnRestart calls.
type recorder struct {
	mu       sync.Mutex
	events   []sdk.Event
	restarts []string
}

func (r *recorder) onEvent(backend string, ev sdk.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) onRestart(backend string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts = append(r.restarts, backend)
}

func (r *recorder) hasEvent(uuid string, kind sdk.EventKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.events, func(ev sdk.Event) bool { return ev.UUID == uuid && ev.Kind == kind })
}

func (r *recorder) restarted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.restarts)
}

func TestRestartAfterSIGKILL(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": nil})
	rec := &recorder{}
	cfg := testConfig(dir, bdir)
	cfg.OnEvent, cfg.OnRestart = rec.onEvent, rec.onRestart
	h := startHost(t, cfg)
	b, err := h.Backend("good")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	sub, err := b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &sdk.GuestSpec{Name: "g1", UUID: "uuid-restart"}
	hd, _ := b.Create(ctx, spec)
	hd, st, err := b.Start(ctx, hd, spec)
	killGuest(t, st)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}

	old := status(h, "good").PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnRestart", func() bool { return len(rec.restarted()) == 1 })
	st2 := status(h, "good")
	if st2.Health != pluginhost.HealthHealthy || st2.PID == old || st2.PID == 0 || st2.Restarts != 1 {
		t.Fatalf("after restart: %+v (old pid %d)", st2, old)
	}
	if !strings.Contains(st2.LastError, "exited") {
		t.Fatalf("LastError = %q, want the exit", st2.LastError)
	}
	if alive(old) {
		t.Fatalf("old plugin %d still alive", old)
	}
	// What the daemon does in OnRestart: recover the guests.
	hd, rst, err := b.Recover(ctx, hd, spec)
	if err != nil || rst.Status != sdk.StatusRunning || rst.PID != st.PID {
		t.Fatalf("Recover = %+v, %v; want running pid %d", rst, err, st.PID)
	}
	if _, err := b.Stop(ctx, hd, sdk.StopOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitFor(t, "EventExited through OnEvent from the new process", func() bool {
		return rec.hasEvent(spec.UUID, sdk.EventExited)
	})
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-sub:
			if ev.UUID == spec.UUID && ev.Kind == sdk.EventExited {
				return
			}
		case <-timeout:
			t.Fatal("the Events subscription did not survive the restart")
		}
	}
}

func TestHungCall(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"hang": {"hang_on": "State"}})
	cfg := testConfig(dir, bdir)
	cfg.CallTimeout = time.Second
	h := startHost(t, cfg)
	b, _ := h.Backend("hang")
	ctx := ctxT(t)
	_, err := b.State(ctx, sdk.Handle(`{"uuid":"x"}`))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("hung State = %v, want a deadline error that is ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "did not answer within 1s") {
		t.Fatalf("error %q does not say the plugin hung", err)
	}
	if _, err := b.Info(ctx); err != nil {
		t.Fatalf("Info after a hung call: %v", err)
	}
	if st := status(h, "hang"); st.Health != pluginhost.HealthHealthy || st.Restarts != 0 {
		t.Fatalf("one hung call made the plugin %+v", st)
	}
}

func TestHungPluginRestartedUntilFixed(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"stuck": nil})
	cfg := testConfig(dir, bdir)
	cfg.StartTimeout = 2 * time.Second
	cfg.HealthTimeout = 500 * time.Millisecond
	h := startHost(t, cfg)
	old := status(h, "stuck").PID
	setBehaviour(t, bdir, "stuck", map[string]any{"hang_on": "Info"})
	sawHung := false
	waitFor(t, "the hung plugin to be retried three times", func() bool {
		st := status(h, "stuck")
		sawHung = sawHung || strings.Contains(st.LastError, "hung")
		return st.Failures >= 3
	})
	st := status(h, "stuck")
	if !sawHung || st.Restarts < 2 || st.Health == pluginhost.HealthFailed {
		t.Fatalf("status = %+v (saw hung: %v), want restarting, never failed", st, sawHung)
	}
	if alive(old) {
		t.Fatalf("hung plugin %d still alive", old)
	}
	b, _ := h.Backend("stuck")
	waitFor(t, "the plugin to be down", func() bool { return status(h, "stuck").PID == 0 })
	if _, err := b.State(ctxT(t), sdk.Handle(`{"uuid":"x"}`)); !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("call on a down plugin = %v, want ErrUnavailable of both kinds", err)
	}
	// Fixed: Restart brings it back at once and resets the backoff.
	setBehaviour(t, bdir, "stuck", nil)
	if err := h.Restart("stuck"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin to be healthy again", func() bool { return status(h, "stuck").Health == pluginhost.HealthHealthy })
	if st := status(h, "stuck"); st.Failures != 0 || st.NextRetryAt != nil {
		t.Fatalf("after Restart: %+v, want the failures reset and no retry pending", st)
	}
	if _, err := b.Info(ctxT(t)); err != nil {
		t.Fatalf("Info after Restart: %v", err)
	}
}

func TestMisbehavingPlugins(t *testing.T) {
	tests := []struct {
		name      string
		behaviour map[string]any
		errText   string
	}{
		{"garbage", map[string]any{"garbage_stdout": true}, "Unrecognized remote plugin message"},
		{"crashes-at-start", map[string]any{"exit_at_start": true}, "exiting at start as asked"},
		{"crash-loop", map[string]any{"exit_after": "300ms"}, "exited"},
	}
	plugins := map[string]map[string]any{}
	for _, tt := range tests {
		plugins[tt.name] = tt.behaviour
	}
	dir, bdir := pluginDir(t, plugins)
	h := startHost(t, testConfig(dir, bdir))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The old supervisor gave up after 5 failures: this one goes on.
			waitFor(t, "six failures", func() bool { return status(h, tt.name).Failures >= 6 })
			st := status(h, tt.name)
			if !strings.Contains(st.LastError, tt.errText) || st.Restarts < 5 || st.Health == pluginhost.HealthFailed {
				t.Fatalf("status = %+v, want restarts going on and an error with %q", st, tt.errText)
			}
		})
	}
}

func TestCloseKillsPlugins(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"a": nil, "b": nil})
	h := pluginhost.New(testConfig(dir, bdir))
	if err := h.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, st := range h.List() {
		if st.PID == 0 {
			t.Fatalf("%s not running: %+v", st.Name, st)
		}
		pids = append(pids, st.PID)
	}
	b, _ := h.Backend("a")
	h.Close()
	for _, pid := range pids {
		if alive(pid) {
			t.Fatalf("plugin %d alive after Close", pid)
		}
	}
	if _, err := b.Info(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Info after Close = %v, want ErrUnavailable", err)
	}
	if err := h.Start(context.Background()); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second Start = %v, want ErrConflict", err)
	}
}

func TestFrozenPluginRestarted(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"frozen": nil})
	rec := &recorder{}
	cfg := testConfig(dir, bdir)
	cfg.HealthTimeout = 500 * time.Millisecond
	cfg.OnRestart = rec.onRestart
	h := startHost(t, cfg)
	old := status(h, "frozen").PID
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnRestart after the freeze", func() bool { return len(rec.restarted()) == 1 })
	st := status(h, "frozen")
	if st.Health != pluginhost.HealthHealthy || st.PID == old || !strings.Contains(st.LastError, "hung") {
		t.Fatalf("status = %+v, want healthy again with a new pid and the hang as last error", st)
	}
	if alive(old) {
		syscall.Kill(old, syscall.SIGKILL)
		t.Fatalf("frozen plugin %d still exists", old)
	}
}

func TestReplacedBinaryRejectedAtRestart(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"swapped": nil})
	h := startHost(t, testConfig(dir, bdir))
	old := status(h, "swapped").PID
	// Replace the binary under the running plugin (a new inode), then
	// crash the plugin: the restart must refuse the new content.
	tmp := filepath.Join(dir, ".swapped.new")
	copyFile(t, pluginBin, tmp)
	f, err := os.OpenFile(tmp, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("extra"))
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "swapped")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rejected", func() bool { return status(h, "swapped").Health == pluginhost.HealthRejected })
	if st := status(h, "swapped"); !strings.Contains(st.LastError, "checksum") || strings.Count(st.LastError, "sha256 ") != 2 || st.PID != 0 {
		t.Fatalf("status = %+v, want rejected for its checksum, with both hashes", st)
	}
}
