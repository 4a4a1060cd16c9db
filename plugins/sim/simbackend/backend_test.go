package simbackend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// TestMain lets the test binary act as the VMM ("<binary> vmm <dir>").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == simvm.Subcommand {
		os.Exit(simvm.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const waitLong = 60 * time.Second

func testOptions(t *testing.T) Options {
	t.Helper()
	dir, err := os.MkdirTemp("", "simb") // short: Unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		quitAll(t, dir)
		os.RemoveAll(dir)
	})
	return Options{DataDir: dir, Executable: exe, Agent: filepath.Join(dir, "no-agent")}
}

// quitAll stops every VMM left under a data dir, so no test leaves
// processes behind even when it failed half-way.
func quitAll(t *testing.T, dataDir string) {
	socks, _ := filepath.Glob(filepath.Join(dataDir, "guests", "*", "control.sock"))
	for _, s := range socks {
		c := &simvm.Client{Socket: s}
		_ = c.Execute(context.Background(), simvm.CmdQuit, nil, nil)
		testwait.Until(waitLong, func() bool {
			_, err := c.Status(context.Background())
			return errors.Is(err, simvm.ErrNotRunning)
		})
	}
}

func newBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newSpec(name string, cfg map[string]string) *sdk.GuestSpec {
	var u [8]byte
	rand.Read(u[:])
	return &sdk.GuestSpec{Name: name, UUID: hex.EncodeToString(u[:]), Config: cfg}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

func createStart(t *testing.T, b *Backend, spec *sdk.GuestSpec) (sdk.Handle, *sdk.GuestState) {
	t.Helper()
	h, err := b.Create(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	h, st, err := b.Start(ctxT(t), h, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st.Status != sdk.StatusRunning || st.PID <= 0 {
		t.Fatalf("Start state = %+v", st)
	}
	return h, st
}

// eventLog collects a backend's events.
type eventLog struct {
	ch <-chan sdk.Event
}

func watchEvents(t *testing.T, b *Backend) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &eventLog{ch: ch}
}

// wait returns the next event of kind for uuid, skipping others.
func (l *eventLog) wait(t *testing.T, kind sdk.EventKind, uuid string) sdk.Event {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case ev, ok := <-l.ch:
			if !ok {
				t.Fatalf("event stream closed while waiting for %v", kind)
			}
			if ev.Kind == kind && ev.UUID == uuid {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %s", kind, uuid)
		}
	}
}

func vmmClient(t *testing.T, h sdk.Handle) *simvm.Client {
	t.Helper()
	hd, err := decodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	return simvm.NewClient(hd.paths())
}

// waitReceived waits until the guest's VMM got n bytes from the wired port.
func waitReceived(t *testing.T, h sdk.Handle, n uint64) {
	t.Helper()
	c := vmmClient(t, h)
	testwait.For(t, fmt.Sprintf("the vmm to receive %d bytes", n), waitLong, func() bool {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.RingReceived >= n
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, waitLong, cond)
}

const portCmd = `"$GUESTLINK_ROOT/dev/virtio-ports/`

func TestRingBufferThroughBackend(t *testing.T) {
	b := newBackend(t, testOptions(t))
	evs := watchEvents(t, b)
	spec := newSpec("ring", map[string]string{
		KeyCommand: `printf 'STARTED\n' > ` + portCmd + `com.canonical.lxd"; printf 'CONNECTED\n' > ` + portCmd + `com.canonical.lxd"; exec sleep 1000`,
	})
	h, st := createStart(t, b, spec)
	for k, want := range map[string]string{DetailLayout: "current", DetailRingSize: "16", DetailBoot: "1"} {
		if st.Details[k] != want {
			t.Errorf("Details[%s] = %q, want %q", k, st.Details[k], want)
		}
	}
	hd, _ := decodeHandle(h)
	if st.Details[DetailDevlxdSocket] != filepath.Join(hd.Dir, "rootfs/dev/lxd/sock") ||
		st.Details[DetailConsoleLog] != filepath.Join(hd.Dir, "console.log") || st.Details[DetailGuestDir] != hd.Dir {
		t.Errorf("Details = %v", st.Details)
	}
	ev := evs.wait(t, sdk.EventRingData, spec.UUID)
	if ev.Port != simvm.PortCurrent || ev.Time.IsZero() {
		t.Fatalf("RING_DATA event = %+v", ev)
	}
	waitReceived(t, h, uint64(len("STARTED\nCONNECTED\n")))
	// A 16-byte ring keeps the last 16 of 18 bytes: a truncated first line.
	got, err := b.ReadRing(ctxT(t), h, 5)
	if err != nil || string(got) != "ARTED" {
		t.Fatalf("ReadRing(5) = %q, %v", got, err)
	}
	got, err = b.ReadRing(ctxT(t), h, 1024)
	if err != nil || string(got) != "\nCONNECTED\n" {
		t.Fatalf("ReadRing(1024) = %q, %v", got, err)
	}
	got, err = b.ReadRing(ctxT(t), h, 1024)
	if err != nil || len(got) != 0 {
		t.Fatalf("ReadRing of an empty ring = %q, %v", got, err)
	}
	if _, err := b.ReadRing(ctxT(t), h, 0); !errors.Is(err, sdk.ErrInvalid) {
		t.Fatalf("ReadRing(0) = %v, want ErrInvalid", err)
	}
	ep, err := b.LinkEndpoint(ctxT(t), h)
	if err != nil || ep.Kind != sdk.LinkHybrid || ep.Path != filepath.Join(hd.Dir, "link.sock") {
		t.Fatalf("LinkEndpoint = %+v, %v", ep, err)
	}
	if _, _, err := b.Start(ctxT(t), h, spec); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("Start of a running guest = %v, want ErrConflict", err)
	}
	if err := b.Delete(ctxT(t), h); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("Delete of a running guest = %v, want ErrConflict", err)
	}
	st, err = b.Stop(ctxT(t), h, sdk.StopOptions{Timeout: 10 * time.Second})
	if err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
	evs.wait(t, sdk.EventExited, spec.UUID)
	if _, err := b.ReadRing(ctxT(t), h, 16); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("ReadRing of a stopped guest = %v, want ErrConflict", err)
	}
	if err := b.Delete(ctxT(t), h); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Stat(hd.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("guest dir after Delete: %v", err)
	}
	if err := b.Delete(ctxT(t), h); err != nil {
		t.Fatalf("second Delete = %v, want success", err)
	}
	if st, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("Stop after Delete = %+v, %v, want stopped", st, err)
	}
	if _, err := b.State(ctxT(t), h); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("State after Delete = %v, want ErrNotFound", err)
	}
}

func TestLegacyLayout(t *testing.T) {
	b := newBackend(t, testOptions(t))
	spec := newSpec("legacy", map[string]string{
		KeyLayout:   "legacy",
		KeyRingSize: "64",
		KeyCommand:  `printf 'STARTED\n' > ` + portCmd + `org.linuxcontainers.lxd"; exec sleep 1000`,
	})
	h, st := createStart(t, b, spec)
	if st.Details[DetailLayout] != "legacy" || st.Details[DetailRingSize] != "64" {
		t.Fatalf("Details = %v", st.Details)
	}
	hd, _ := decodeHandle(h)
	if _, err := os.Stat(hd.paths().Port(simvm.PortCurrent)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy guest has %s: %v", simvm.PortCurrent, err)
	}
	waitReceived(t, h, 8)
	if got, err := b.ReadRing(ctxT(t), h, 64); err != nil || string(got) != "STARTED\n" {
		t.Fatalf("ReadRing = %q, %v", got, err)
	}
	if st, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil || st.Details[DetailLayout] != "legacy" {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
}

func TestRingFlood(t *testing.T) {
	b := newBackend(t, testOptions(t))
	evs := watchEvents(t, b) // not read during the flood: a slow consumer
	const lines = 1 << 20    // 8 MiB of "STARTED\n"
	spec := newSpec("flood", map[string]string{
		KeyCommand: fmt.Sprintf(`yes STARTED | head -n %d > %scom.canonical.lxd"; printf 'STOPPED\n' > %scom.canonical.lxd"; exec sleep 1000`, lines, portCmd, portCmd),
	})
	h, st := createStart(t, b, spec)
	total := uint64(lines*8 + 8)
	waitReceived(t, h, total)
	got, err := b.ReadRing(ctxT(t), h, 1024)
	if err != nil || string(got) != "STARTED\nSTOPPED\n" {
		t.Fatalf("ReadRing after the flood = %q, %v", got, err)
	}
	rss := vmRSS(t, int(st.PID))
	if rss > 64<<20 {
		t.Errorf("vmm resident memory %d bytes after an 8 MiB flood", rss)
	}
	t.Logf("vmm rss %d KiB", rss>>10)
	// Events coalesce while the consumer is away: at most one per kind
	// (ring data, port opened, port closed) queues per guest, the rest are
	// dropped (the eventer's drop policy).
	for _, st := range b.events.Stats() {
		if st.Queued > 3 || st.Dropped == 0 {
			t.Errorf("event queue of a slow consumer: %d queued, %d dropped; want at most 3 queued and some dropped", st.Queued, st.Dropped)
		}
	}
	evs.wait(t, sdk.EventRingData, spec.UUID)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > 64<<20 {
		t.Errorf("plugin heap in use %d bytes after the flood", ms.HeapInuse)
	}
	if st, err := b.State(ctxT(t), h); err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("State after the flood = %+v, %v", st, err)
	}
	if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func TestStopModes(t *testing.T) {
	tests := []struct {
		name    string
		command string
		opts    sdk.StopOptions
		status  string
	}{
		{"powerdown", `trap 'exit 7' TERM; touch "$GUESTLINK_ROOT/ready"; while :; do sleep 0.05; done`, sdk.StopOptions{Timeout: 30 * time.Second}, "exit status 7"},
		{"powerdown ignored then killed", `trap '' TERM; touch "$GUESTLINK_ROOT/ready"; while :; do sleep 0.05; done`, sdk.StopOptions{Timeout: 300 * time.Millisecond}, "signal: killed"},
		{"force", `touch "$GUESTLINK_ROOT/ready"; exec sleep 1000`, sdk.StopOptions{Force: true}, "signal: killed"},
	}
	b := newBackend(t, testOptions(t))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs := watchEvents(t, b)
			spec := newSpec("stop", map[string]string{KeyCommand: tc.command})
			h, _ := createStart(t, b, spec)
			hd, _ := decodeHandle(h)
			// Power the guest down once it has set its signal handling up.
			waitFor(t, "the guest to be up", func() bool {
				_, err := os.Stat(filepath.Join(hd.paths().Root(), "ready"))
				return err == nil
			})
			st, err := b.Stop(ctxT(t), h, tc.opts)
			if err != nil || st.Status != sdk.StatusStopped || st.Details[DetailExitStatus] != tc.status {
				t.Fatalf("Stop = %+v, %v; want exit status %q", st, err, tc.status)
			}
			ev := evs.wait(t, sdk.EventExited, spec.UUID)
			if !strings.Contains(ev.Detail, tc.status) {
				t.Fatalf("EXITED detail %q lacks %q", ev.Detail, tc.status)
			}
			st, err = b.Stop(ctxT(t), h, tc.opts)
			if err != nil || st.Status != sdk.StatusStopped {
				t.Fatalf("Stop of a stopped guest = %+v, %v", st, err)
			}
			// A stopped guest starts again.
			if _, st, err := b.Start(ctxT(t), h, spec); err != nil || st.Status != sdk.StatusRunning {
				t.Fatalf("restart = %+v, %v", st, err)
			}
			if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGuestExitAndReset(t *testing.T) {
	b := newBackend(t, testOptions(t))
	evs := watchEvents(t, b)
	t.Run("exit", func(t *testing.T) {
		spec := newSpec("exit", map[string]string{KeyCommand: "exit 0"})
		h, _ := createStart(t, b, spec)
		ev := evs.wait(t, sdk.EventExited, spec.UUID)
		if !strings.Contains(ev.Detail, "exit status 0") {
			t.Fatalf("EXITED detail = %q", ev.Detail)
		}
		// Right after EXITED the state is stopped, even while the VMM is
		// still finishing.
		st, err := b.State(ctxT(t), h)
		if err != nil || st.Status != sdk.StatusStopped || st.Details[DetailExitStatus] != "exit status 0" {
			t.Fatalf("State after EXITED = %+v, %v", st, err)
		}
	})
	t.Run("system_reset", func(t *testing.T) {
		spec := newSpec("reset", map[string]string{KeyCommand: `echo boot >> "$GUESTLINK_ROOT/boots"; exec sleep 1000`})
		h, st := createStart(t, b, spec)
		firstGuest, _ := strconv.Atoi(st.Details[DetailGuestPID])
		hd, _ := decodeHandle(h)
		boots := func(n int) func() bool {
			return func() bool {
				data, _ := os.ReadFile(filepath.Join(hd.paths().Root(), "boots"))
				return bytes.Count(data, []byte("\n")) == n
			}
		}
		waitFor(t, "first boot", boots(1))
		if err := vmmClient(t, h).Execute(ctxT(t), simvm.CmdSystemReset, nil, nil); err != nil {
			t.Fatal(err)
		}
		evs.wait(t, sdk.EventReset, spec.UUID)
		st, err := b.State(ctxT(t), h)
		if err != nil || st.Status != sdk.StatusRunning || st.Details[DetailBoot] != "2" || st.Details[DetailGuestPID] == strconv.Itoa(firstGuest) {
			t.Fatalf("State after reset = %+v, %v", st, err)
		}
		waitFor(t, "second boot", boots(2))
		if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestVMMKilled(t *testing.T) {
	b := newBackend(t, testOptions(t))
	evs := watchEvents(t, b)
	spec := newSpec("crash", map[string]string{KeyCommand: `sleep 1000 & echo $! > "$GUESTLINK_ROOT/child"; wait`})
	h, st := createStart(t, b, spec)
	guestPID, _ := strconv.Atoi(st.Details[DetailGuestPID])
	hd, _ := decodeHandle(h)
	var childPID int
	waitFor(t, "the guest's child", func() bool {
		data, _ := os.ReadFile(filepath.Join(hd.paths().Root(), "child"))
		childPID, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return childPID > 0
	})
	if err := syscall.Kill(int(st.PID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := evs.wait(t, sdk.EventExited, spec.UUID)
	if !strings.Contains(ev.Detail, "vmm ended unexpectedly") {
		t.Fatalf("EXITED detail = %q", ev.Detail)
	}
	st, err := b.State(ctxT(t), h)
	if err != nil || st.Status != sdk.StatusError || !strings.Contains(st.Message, "vmm") {
		t.Fatalf("State after the vmm died = %+v, %v", st, err)
	}
	waitFor(t, "the guest to die with its vmm", func() bool { return dead(guestPID) })
	if dead(childPID) {
		t.Fatalf("the guest's child %d should outlive a killed vmm until Stop", childPID)
	}
	st, err = b.Stop(ctxT(t), h, sdk.StopOptions{})
	if err != nil || st.Status != sdk.StatusStopped || st.Message == "" {
		t.Fatalf("Stop of a crashed guest = %+v, %v", st, err)
	}
	waitFor(t, "Stop to kill what the lost vmm left", func() bool { return dead(childPID) })
	if _, st, err := b.Start(ctxT(t), h, spec); err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("Start after a crash = %+v, %v", st, err)
	}
	if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}
