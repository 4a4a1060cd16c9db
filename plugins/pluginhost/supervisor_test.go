package pluginhost_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestKilledSixTimes: the supervisor brings a plugin back after each of six
// SIGKILLs in a row (the old one gave up after five), each restart seen as
// an OnRestart call, not guessed with a sleep.
func TestKilledSixTimes(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"victim": nil})
	restarted := make(chan string, 16)
	cfg := testConfig(dir, bdir)
	cfg.OnRestart = func(name string) { restarted <- name }
	h := startHost(t, cfg)
	seen := map[int]bool{}
	for i := 1; i <= 6; i++ {
		pid := status(h, "victim").PID
		if pid == 0 || seen[pid] {
			t.Fatalf("kill %d: plugin pid %d (seen: %v)", i, pid, seen)
		}
		seen[pid] = true
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-restarted:
		case <-time.After(time.Minute):
			t.Fatalf("kill %d: no restart within a minute: %+v", i, status(h, "victim"))
		}
		if alive(pid) {
			t.Fatalf("kill %d: old plugin %d still alive", i, pid)
		}
	}
	st := status(h, "victim")
	if st.Health != pluginhost.HealthHealthy || st.Restarts != 6 || st.Failures != 6 || !strings.Contains(st.LastError, "exited") {
		t.Fatalf("after six kills: %+v, want healthy with 6 restarts and the exit as last error", st)
	}
	b, _ := h.Backend("victim")
	if _, err := b.Info(ctxT(t)); err != nil {
		t.Fatalf("Info after six kills: %v", err)
	}
}

// TestFailingBinaryKeepsRetrying: a plugin that cannot start is retried
// forever; its health says why and when the next attempt is, and Restart
// after the fix brings it back at once.
func TestFailingBinaryKeepsRetrying(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"broken": {"exit_at_start": true}})
	cfg := testConfig(dir, bdir)
	cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 40*time.Millisecond
	h := startHost(t, cfg)
	var sawRetryAt bool
	waitFor(t, "eight failed starts", func() bool {
		st := status(h, "broken")
		if st.NextRetryAt != nil {
			sawRetryAt = true
			if d := time.Until(*st.NextRetryAt); d > cfg.MaxBackoff {
				t.Fatalf("next retry in %v, more than MaxBackoff %v", d, cfg.MaxBackoff)
			}
		}
		return st.Failures >= 8
	})
	st := status(h, "broken")
	if st.Health != pluginhost.HealthRestarting || !strings.Contains(st.LastError, "exiting at start as asked") || st.PID != 0 || !sawRetryAt {
		t.Fatalf("status = %+v (saw next_retry_at: %v), want restarting with the start error", st, sawRetryAt)
	}
	setBehaviour(t, bdir, "broken", nil)
	st, err := h.RestartWait(ctxT(t), "broken")
	if err != nil {
		t.Fatal(err)
	}
	if st.Health != pluginhost.HealthHealthy || st.Failures != 0 || st.NextRetryAt != nil || st.PID == 0 {
		t.Fatalf("RestartWait = %+v, want healthy with the failures reset", st)
	}
	if _, err := h.RestartWait(ctxT(t), "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("RestartWait(nope) = %v, want ErrNotFound", err)
	}
}

// TestBackoffSchedule runs the supervisor on a fake clock: the waits between
// the attempts of a plugin that never starts grow from MinBackoff to the
// one-minute cap and stay there, and Restart resets them.
func TestBackoffSchedule(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"broken": {"exit_at_start": true}})
	cfg := testConfig(dir, bdir)
	cfg.MinBackoff, cfg.MaxBackoff = 0, 0 // the defaults: 500ms, 1m
	h := pluginhost.New(cfg)
	var mu sync.Mutex
	var waits []time.Duration
	enough, release := make(chan struct{}), make(chan struct{})
	pluginhost.SetWait(h, func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		n := len(waits)
		mu.Unlock()
		if n == 16 {
			// Hold the supervisor here, as a long wait would, until the
			// test asked for a restart.
			close(enough)
			<-release
		}
	})
	if err := h.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	<-enough
	mu.Lock()
	got := append([]time.Duration(nil), waits[:16]...)
	mu.Unlock()
	if got[0] < 400*time.Millisecond || got[0] > 600*time.Millisecond {
		t.Errorf("first wait %v, want 500ms ± 20%%", got[0])
	}
	for i, d := range got {
		if d > time.Minute {
			t.Errorf("wait %d is %v, above the one-minute cap", i, d)
		}
		if i > 0 && d < got[i-1] && d < 48*time.Second {
			t.Errorf("wait %d (%v) shorter than wait %d (%v) before the cap", i, d, i-1, got[i-1])
		}
	}
	if last := got[15]; last < 48*time.Second {
		t.Errorf("16th wait %v, want the cap (48s..1m with jitter)", last)
	}
	if err := h.Restart("broken"); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, "a wait after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(waits) > 16
	})
	mu.Lock()
	defer mu.Unlock()
	if d := waits[16]; d > 600*time.Millisecond {
		t.Errorf("first wait after Restart %v, want the backoff reset to 500ms", d)
	}
}

// TestHealthChecksUnderCPUFlood: while the daemon's own goroutines starve
// (hundreds of busy goroutines per CPU), health pings time out, but the
// supervisor sees that the daemon is saturated and does not kill the
// plugin, a real process that answers.
func TestHealthChecksUnderCPUFlood(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"busy": nil})
	cfg := testConfig(dir, bdir)
	cfg.HealthInterval = 50 * time.Millisecond
	cfg.HealthTimeout = 100 * time.Millisecond
	h := startHost(t, cfg)
	before := status(h, "busy")
	var stop atomic.Bool
	var wg sync.WaitGroup
	n := 150 * runtime.GOMAXPROCS(0)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for !stop.Load() {
				x++
			}
			_ = x
		}()
	}
	waitFor(t, "health checks skipped under the flood", func() bool { return status(h, "busy").SkippedChecks >= 3 })
	stop.Store(true)
	wg.Wait()
	after := status(h, "busy")
	if after.PID != before.PID || after.Restarts != 0 || after.Health != pluginhost.HealthHealthy {
		t.Fatalf("after the flood: %+v, before: %+v; the plugin must not be restarted", after, before)
	}
	b, _ := h.Backend("busy")
	if _, err := b.Info(ctxT(t)); err != nil {
		t.Fatalf("Info after the flood: %v", err)
	}
}

// TestRestartVerifiesAgain: Restart reads SHA256SUMS anew, so a plugin
// rejected at discovery starts once its checksum is fixed (and the daemon
// is told to recover its guests), and a wrong checksum is refused.
func TestRestartVerifiesAgain(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"late": nil})
	f, err := os.OpenFile(filepath.Join(dir, "late"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("upgraded"))
	f.Close()
	restarted := make(chan string, 4)
	cfg := testConfig(dir, bdir)
	cfg.OnRestart = func(name string) { restarted <- name }
	h := startHost(t, cfg)
	if st := status(h, "late"); st.Health != pluginhost.HealthRejected {
		t.Fatalf("status = %+v, want rejected", st)
	}
	_, err = h.RestartWait(ctxT(t), "late")
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, pluginhost.ErrChecksum) || strings.Count(err.Error(), "sha256 ") != 2 {
		t.Fatalf("RestartWait with the old checksum = %v, want a checksum rejection with both hashes", err)
	}
	if err := pluginhost.WriteChecksums(dir); err != nil {
		t.Fatal(err)
	}
	st, err := h.RestartWait(ctxT(t), "late")
	if err != nil || st.Health != pluginhost.HealthHealthy || st.PID == 0 {
		t.Fatalf("RestartWait after fixing SHA256SUMS = %+v, %v; want healthy", st, err)
	}
	select {
	case name := <-restarted:
		if name != "late" {
			t.Fatalf("OnRestart(%q)", name)
		}
	case <-time.After(time.Minute):
		t.Fatal("OnRestart not called for a plugin first started by Restart")
	}
	if _, err := h.Backend("late"); err != nil {
		t.Fatalf("Backend after the fix: %v", err)
	}
}

// TestHealthPingsSkippedWhileHeard: a plugin whose event stream spoke in
// the last health interval is not pinged (its events prove it runs: a
// busy plugin's guests send them all the time), while a silent plugin is
// pinged every interval. Tried: "chatty" sends an event every 10 ms,
// "quiet" none, health interval 50 ms; before, both were pinged alike.
func TestHealthPingsSkippedWhileHeard(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{
		"chatty": {"event_every": "10ms"},
		"quiet":  nil,
	})
	cfg := testConfig(dir, bdir)
	cfg.HealthInterval = 50 * time.Millisecond
	var heard atomic.Int64
	cfg.OnEvent = func(name string, _ sdk.Event) {
		if name == "chatty" {
			heard.Add(1)
		}
	}
	h := startHost(t, cfg)
	waitFor(t, "twenty pings of the quiet plugin", func() bool { return pluginhost.Pings(h, "quiet") >= 20 })
	chatty, quiet := pluginhost.Pings(h, "chatty"), pluginhost.Pings(h, "quiet")
	if heard.Load() == 0 {
		t.Fatal("no event from the chatty plugin")
	}
	// A ping when its events came late (a loaded machine) is allowed; one
	// per interval is not.
	if chatty*4 > quiet {
		t.Fatalf("the chatty plugin was pinged %d times while the quiet one was %d times (%d events heard)", chatty, quiet, heard.Load())
	}
	for _, name := range []string{"chatty", "quiet"} {
		if st := status(h, name); st.Health != pluginhost.HealthHealthy || st.Restarts != 0 {
			t.Fatalf("%s: %+v, want healthy and never restarted", name, st)
		}
	}
}
