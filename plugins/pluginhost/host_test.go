package pluginhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// pluginBin is the SDK's test plugin (internal/testbin's shared build: the
// tests copy it, never change it), found by TestMain.
var pluginBin string

func TestMain(m *testing.M) {
	var err error
	pluginBin, err = testbin.Path(testbin.Module + "/plugins/sdk/internal/misbehaving")
	code := 1
	if err != nil {
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
		// The example's guests keep their files in the data directory
		// (removed with bdir, a test's temporary directory).
		Env: []string{"MISBEHAVING_BEHAVIOUR_DIR=" + bdir, sdk.DataDirEnv + "=" + filepath.Join(bdir, "data")},
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
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": {"version": "1.2.3", "instance_type": "container"}, "badsum": nil})
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
	// The instance type a plugin declares; a plugin not running, or an
	// unknown name, is a virtual machine (what older plugins are).
	for name, want := range map[string]string{"good": "container", "badsum": "virtual-machine", "nope": "virtual-machine"} {
		if got := h.InstanceType(name); got != want {
			t.Errorf("InstanceType(%q) = %q, want %q", name, got, want)
		}
	}
	if st := status(h, "good"); st.InstanceType != "container" {
		t.Errorf("good: Status.InstanceType %q, want container", st.InstanceType)
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
