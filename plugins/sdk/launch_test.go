package sdk_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// pluginBin is the test plugin built by TestMain; behaviourDir holds the
// behaviour files it reads.
var pluginBin, behaviourDir string

func TestMain(m *testing.M) {
	if os.Getenv("SDK_TEST_FAKE_DAEMON") != "" {
		fakeDaemon()
		return
	}
	dir, err := os.MkdirTemp("", "sdk-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "test")
	behaviourDir = filepath.Join(dir, "behaviour")
	code := 1
	if err := buildPlugin(pluginBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else if err := os.Mkdir(behaviourDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		os.Setenv("MISBEHAVING_BEHAVIOUR_DIR", behaviourDir)
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

func buildPlugin(out string) error {
	cmd := exec.Command("go", "build", "-o", out, "github.com/guestlink/guestlink/plugins/sdk/internal/misbehaving")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building test plugin: %w", err)
	}
	return nil
}

// variant links the test plugin under name, with behaviour b.
func variant(t *testing.T, name string, b map[string]any) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(pluginBin), name)
	if err := os.Link(pluginBin, path); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(behaviourDir, name+".json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func launch(t *testing.T, path string, opts sdk.LaunchOptions) *sdk.Client {
	t.Helper()
	c, err := sdk.Launch(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(c.Kill)
	return c
}

// processGone waits until pid has exited (a zombie counts) and reports
// whether it did within the time. It waits on a pidfd, which becomes
// readable when the process exits, also for processes that are not the
// test's children. (The SDK is its own module: it has its own copy of the
// daemon's internal/testwait.ProcessExit.)
func processGone(pid int, within time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(within)
	for {
		left := max(time.Until(deadline), 0)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

func TestLaunchCalls(t *testing.T) {
	c := launch(t, pluginBin, sdk.LaunchOptions{})
	b := c.Backend()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := b.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name != "misbehaving" || !info.Has(sdk.CapRecover) {
		t.Fatalf("Info = %+v", info)
	}
	events, err := b.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}

	spec := &sdk.GuestSpec{Name: "g1", UUID: "uuid-g1", Config: map[string]string{"user.x": "1"}}
	t.Run("invalid config", func(t *testing.T) {
		bad := &sdk.GuestSpec{Name: "g1", UUID: "uuid-g1", Config: map[string]string{"example.nope": "1"}}
		_, err := b.Create(ctx, bad)
		if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), `"example.nope"`) {
			t.Fatalf("Create with unknown key: %v, want ErrInvalid naming the key", err)
		}
	})
	t.Run("garbage handle", func(t *testing.T) {
		if _, err := b.State(ctx, sdk.Handle("{nope")); !errors.Is(err, sdk.ErrInvalid) {
			t.Fatalf("State(garbage) = %v, want ErrInvalid", err)
		}
		if _, err := b.ReadRing(ctx, nil, 10); !errors.Is(err, sdk.ErrInvalid) {
			t.Fatalf("ReadRing(nil) = %v, want ErrInvalid", err)
		}
	})
	t.Run("nil spec", func(t *testing.T) {
		if _, err := b.Create(ctx, nil); !errors.Is(err, sdk.ErrInvalid) {
			t.Fatalf("Create(nil) = %v, want ErrInvalid", err)
		}
	})
	t.Run("lifecycle", func(t *testing.T) {
		h, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		h, st, err := b.Start(ctx, h, spec)
		if err != nil || st.Status != sdk.StatusRunning || st.PID == 0 {
			t.Fatalf("Start = %+v, %v", st, err)
		}
		if _, _, err := b.Start(ctx, h, spec); !errors.Is(err, sdk.ErrConflict) {
			t.Fatalf("second Start = %v, want ErrConflict", err)
		}
		if err := b.Delete(ctx, h); !errors.Is(err, sdk.ErrConflict) {
			t.Fatalf("Delete running = %v, want ErrConflict", err)
		}
		ep, err := b.LinkEndpoint(ctx, h)
		if err != nil || ep.Kind != sdk.LinkHybrid || ep.Path == "" {
			t.Fatalf("LinkEndpoint = %+v, %v", ep, err)
		}
		st, err = b.Stop(ctx, h, sdk.StopOptions{Timeout: 5 * time.Second})
		if err != nil || st.Status != sdk.StatusStopped {
			t.Fatalf("Stop = %+v, %v", st, err)
		}
		waitExited(t, events, spec.UUID)
		if err := b.Delete(ctx, h); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	})
	pid := c.PID()
	if pid <= 0 {
		t.Fatalf("PID = %d", pid)
	}
	c.Kill()
	if !c.Exited() || !processGone(pid, 10*time.Second) {
		t.Fatalf("plugin %d still running after Kill", pid)
	}
	for range events { // the stream ends with the process
	}
	if _, err := b.Info(ctx); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Info after Kill = %v, want ErrUnavailable", err)
	}
}

func waitExited(t *testing.T, events <-chan sdk.Event, uuid string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("event stream ended before EventExited")
			}
			if ev.UUID == uuid && ev.Kind == sdk.EventExited {
				return
			}
		case <-timeout:
			t.Fatalf("no EventExited for %s", uuid)
		}
	}
}

func TestLaunchFailures(t *testing.T) {
	data, err := os.ReadFile(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	wrong := sha256.Sum256([]byte("something else"))
	tests := []struct {
		name      string
		behaviour map[string]any
		opts      sdk.LaunchOptions
		wantErr   error  // a kind, or nil
		wantText  string // in the message
	}{
		{name: "checksum ok", opts: sdk.LaunchOptions{Checksum: sum[:]}},
		{name: "checksum wrong", opts: sdk.LaunchOptions{Checksum: wrong[:]}, wantErr: sdk.ErrChecksum, wantText: "checksum"},
		{name: "garbage stdout", behaviour: map[string]any{"garbage_stdout": true}, wantText: "to stdout instead of the plugin handshake"},
		{name: "exit at start", behaviour: map[string]any{"exit_at_start": true}, wantText: "exiting at start as asked"},
		{name: "no handshake", behaviour: map[string]any{"start_delay": "1m"}, opts: sdk.LaunchOptions{StartTimeout: time.Second}, wantText: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := variant(t, strings.ReplaceAll(tt.name, " ", "-"), tt.behaviour)
			c, err := sdk.Launch(context.Background(), path, tt.opts)
			if tt.wantText == "" {
				if err != nil {
					t.Fatalf("Launch: %v", err)
				}
				c.Kill()
				return
			}
			if err == nil {
				c.Kill()
				t.Fatal("Launch succeeded")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Launch = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Launch error %q does not name %q and the path", err, tt.wantText)
			}
		})
	}
}

func TestPluginCrashIsUnavailable(t *testing.T) {
	c := launch(t, variant(t, "crashy", map[string]any{"crash_on": "State"}), sdk.LaunchOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Backend().State(ctx, sdk.Handle(`{"uuid":"x"}`)); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("State on crashing plugin = %v, want ErrUnavailable", err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the plugin crashed")
	}
	if !c.Exited() {
		t.Fatal("Exited = false after crash")
	}
}

// fakeDaemon runs in a child process: it launches the plugin, prints its
// pid and waits to be killed.
func fakeDaemon() {
	c, err := sdk.Launch(context.Background(), os.Getenv("SDK_TEST_FAKE_DAEMON"), sdk.LaunchOptions{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(c.PID())
	select {}
}

func TestPluginDiesWithDaemon(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SDK_TEST_FAKE_DAEMON="+pluginBin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line := make([]byte, 64)
	n, err := io.ReadAtLeast(out, line, 1)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("fake daemon said %q", line[:n])
	}
	if processGone(pid, 0) {
		t.Fatalf("plugin %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid, 30*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("plugin %d survived its SIGKILLed daemon", pid)
	}
}

func TestKillFrozenPlugin(t *testing.T) {
	c, err := sdk.Launch(context.Background(), pluginBin, sdk.LaunchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := c.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	go func() {
		c.Kill()
		close(killed)
	}()
	select {
	case <-killed:
	case <-time.After(time.Minute):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("Kill of a frozen plugin did not return")
	}
	if !processGone(pid, 10*time.Second) {
		t.Fatalf("frozen plugin %d survived Kill", pid)
	}
}

// BenchmarkCallRoundTrip measures one State call to a real plugin process
// (gRPC over go-plugin's AutoMTLS connection).
func BenchmarkCallRoundTrip(b *testing.B) {
	c, err := sdk.Launch(context.Background(), pluginBin, sdk.LaunchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Kill()
	be := c.Backend()
	ctx := context.Background()
	h := sdk.Handle(`{"uuid":"bench"}`)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, err := be.State(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/call")
}

// BenchmarkLaunch measures starting a plugin process up to a usable Backend.
func BenchmarkLaunch(b *testing.B) {
	for b.Loop() {
		c, err := sdk.Launch(context.Background(), pluginBin, sdk.LaunchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		c.Kill()
	}
}
