package qemuvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// agentFiles returns a config drive with a fresh agent key pair.
func agentFiles(t testing.TB) []sdk.File {
	t.Helper()
	p := testcert.New(t, "guestlink-agent")
	return []sdk.File{
		{Path: "agent.crt", Mode: 0o644, Data: p.CertPEM},
		{Path: "agent.key", Mode: 0o600, Data: p.KeyPEM},
		{Path: "server.crt", Mode: 0o644, Data: p.CertPEM},
	}
}

// shortTempDir returns a temporary directory with a short path (socket
// paths are limited to 107 bytes).
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "glq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type bootEnv struct {
	b    *Backend
	img  qemutest.Image
	spec *sdk.GuestSpec
	h    sdk.Handle
}

// newBootEnv creates (not starts) a guest on a fresh backend with layout l.
func newBootEnv(t testing.TB, l Layout, extraAppend string) *bootEnv {
	t.Helper()
	img := qemutest.RequiresQEMU(t)
	b, err := New(Options{Name: "qemu-test", Layout: l, Dir: shortTempDir(t), Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	spec := &sdk.GuestSpec{Name: "boot1", UUID: newUUID(), Files: agentFiles(t), Config: map[string]string{
		KeyKernel: img.Kernel, KeyInitrd: img.Initrd, KeyAccel: AccelTCG, KeyAppend: extraAppend,
	}}
	h, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	e := &bootEnv{b: b, img: img, spec: spec, h: h}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := b.Stop(ctx, e.h, sdk.StopOptions{Force: true}); err != nil {
			t.Errorf("cleanup stop: %v", err)
		}
	})
	return e
}

func (e *bootEnv) start(t testing.TB, restore bool) *sdk.GuestState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := *e.spec
	spec.RestoreState = restore
	h, st, err := e.b.Start(ctx, e.h, &spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.h = h
	return st
}

// waitWord polls ReadRing until the agent's word w is the last complete line.
func (e *bootEnv) waitWord(t testing.TB, w ringproto.Word, within time.Duration) {
	t.Helper()
	var p ringproto.Parser
	var seen bytes.Buffer
	// QEMU announces no ring data: read the ring until the word shows.
	if testwait.Until(within, func() bool {
		data, err := e.b.ReadRing(context.Background(), e.h, 4096)
		if err != nil {
			t.Fatalf("ReadRing: %v", err)
		}
		seen.Write(data)
		got, ok := p.Feed(data)
		return ok && got == w
	}) {
		return
	}
	h, _ := decodeHandle(e.h)
	t.Fatalf("no %s in the ring within %v (read %q); console:\n%s", w, within, seen.Bytes(), tail(filepath.Join(h.Dir, consoleLog), 3000))
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	return sprintfUUID(b)
}

func sprintfUUID(b [16]byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// TestBootRingWiring checks the ring wiring of both layouts without the
// agent (/init writes a word); with an agent in the image,
// TestBootAgentStarted covers the same ground and this test skips.
func TestBootRingWiring(t *testing.T) {
	for _, l := range []Layout{LayoutCurrent, LayoutLegacy} {
		t.Run(string(l), func(t *testing.T) {
			e := newBootEnv(t, l, "guestlink.ring=STOPPED")
			if e.img.HasAgent {
				// Not a missing requirement: this test is for images without the agent.
				t.Skip("the image has the agent: TestBootAgentStarted covers the wiring")
			}
			st := e.start(t, false)
			if st.Status != sdk.StatusRunning || st.PID == 0 || st.Details["layout"] != string(l) {
				t.Fatalf("Start state = %+v", st)
			}
			// /init writes the word to whichever port is wired; the agent may
			// overwrite it with its own words, so accept either.
			e.waitAny(t, 3*time.Minute)
		})
	}
}

// waitAny waits for any agent word in the ring.
func (e *bootEnv) waitAny(t testing.TB, within time.Duration) ringproto.Word {
	t.Helper()
	var p ringproto.Parser
	var w ringproto.Word
	if testwait.Until(within, func() bool {
		data, err := e.b.ReadRing(context.Background(), e.h, 4096)
		if err != nil {
			t.Fatalf("ReadRing: %v", err)
		}
		var ok bool
		w, ok = p.Feed(data)
		return ok
	}) {
		return w
	}
	h, _ := decodeHandle(e.h)
	t.Fatalf("no word in the ring within %v; console:\n%s", within, tail(filepath.Join(h.Dir, consoleLog), 3000))
	return ""
}

// TestBootAgentStarted boots the guest image under TCG in both layouts and
// reads the agent's STARTED through ReadRing (the legacy layout has no
// com.canonical.lxd port: the agent falls back to org.linuxcontainers.lxd).
// A graceful stop then goes through the ACPI power button.
func TestBootAgentStarted(t *testing.T) {
	for _, l := range []Layout{LayoutCurrent, LayoutLegacy} {
		t.Run(string(l), func(t *testing.T) {
			e := newBootEnv(t, l, "")
			if !e.img.HasAgent {
				testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
			}
			events, err := e.b.Events(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Drained as they come: the eventer coalesces a guest's queued
			// port-opened hints (the link port's would hide the ring's).
			seenc := make(chan map[sdk.EventKind]string, 1)
			go func() {
				seen := map[sdk.EventKind]string{}
				defer func() { seenc <- seen }()
				for ev := range events {
					if (ev.Kind == sdk.EventPortOpened || ev.Kind == sdk.EventPortClosed) && ev.Port != l.RingPort() {
						continue
					}
					seen[ev.Kind] = ev.Port + ev.Detail
					if ev.Kind == sdk.EventExited {
						return
					}
				}
			}()
			e.start(t, false)
			e.waitWord(t, ringproto.Started, 3*time.Minute)

			ep, err := e.b.LinkEndpoint(context.Background(), e.h)
			if err != nil || ep.Kind != sdk.LinkSerial || ep.Path == "" {
				t.Fatalf("LinkEndpoint = %+v, %v", ep, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Timeout: 45 * time.Second})
			if err != nil || st.Status != sdk.StatusStopped {
				t.Fatalf("graceful Stop = %+v, %v", st, err)
			}
			// The agent opened the ring port (VSERPORT_CHANGE) and QEMU exited.
			var seen map[sdk.EventKind]string
			select {
			case seen = <-seenc:
			case <-ctx.Done():
				t.Fatalf("no exited event, want port-opened on %s and exited", l.RingPort())
			}
			if _, ok := seen[sdk.EventPortOpened]; !ok {
				t.Errorf("no port-opened event for %s (seen %v)", l.RingPort(), seen)
			}
		})
	}
}

func TestStatefulRestore(t *testing.T) {
	e := newBootEnv(t, LayoutCurrent, "guestlink.ring=STOPPED")
	e.start(t, false)
	e.waitAny(t, 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Stateful: true})
	if err != nil || st.Status != sdk.StatusStopped || !st.HasSavedState {
		t.Fatalf("stateful Stop = %+v, %v", st, err)
	}

	// The legacy plugin refuses the state before starting QEMU.
	legacy, err := New(Options{Name: "qemu-legacy-test", Layout: LayoutLegacy, Dir: e.b.opts.Dir, Host: &HostCaps{}})
	if err != nil {
		t.Fatal(err)
	}
	lh, _ := decodeHandle(e.h)
	logBefore, _ := os.ReadFile(filepath.Join(lh.Dir, qemuLog))
	os.WriteFile(filepath.Join(lh.Dir, qemuLog), append(logBefore, "marker\n"...), 0o600)
	spec := *e.spec
	spec.RestoreState = true
	_, _, err = legacy.Start(ctx, lh.encode(), &spec)
	if !errors.Is(err, sdk.ErrConflict) || !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("cross-layout restore = %v, want ErrConflict and ErrLayoutMismatch", err)
	}
	for _, want := range []string{ringproto.PortCurrent, ringproto.PortLegacy, "stateless"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("cross-layout restore error %q does not mention %q", err, want)
		}
	}
	// QEMU never ran: Start truncates qemu.log before it runs QEMU.
	if got, _ := os.ReadFile(filepath.Join(lh.Dir, qemuLog)); !bytes.HasSuffix(got, []byte("marker\n")) {
		t.Fatalf("the refused restore touched qemu.log: %q", got)
	}

	// The same layout restores: the guest runs again without a reboot.
	st = e.start(t, true)
	if st.Status != sdk.StatusRunning || st.HasSavedState {
		t.Fatalf("restore state = %+v", st)
	}

	// A stateless start after another stateful stop boots afresh and
	// discards the state, so no later start can restore a stale one.
	if st, err = e.b.Stop(ctx, e.h, sdk.StopOptions{Stateful: true}); err != nil || !st.HasSavedState {
		t.Fatalf("second stateful Stop = %+v, %v", st, err)
	}
	if st = e.start(t, false); st.Status != sdk.StatusRunning || st.HasSavedState {
		t.Fatalf("stateless start = %+v, want running with no saved state", st)
	}
	if st, err = e.b.Stop(ctx, e.h, sdk.StopOptions{Force: true}); err != nil || st.HasSavedState {
		t.Fatalf("after a stateless start and a plain stop = %+v, %v; want no saved state", st, err)
	}
}

// TestRingKeptAfterPowerOff boots the agent image, which powers itself off
// 3 s after boot (guestlink.poweroff=3; busybox init TERMs the agent, which
// writes STOPPED, then powers off), and reads nothing until QEMU is gone:
// the ring's last bytes must still be there (QEMU runs with -no-shutdown,
// the backend reads the ring at the power-off, then quits QEMU). Before,
// the ring went with QEMU and ReadRing answered "not running".
func TestRingKeptAfterPowerOff(t *testing.T) {
	e := newBootEnv(t, LayoutCurrent, "guestlink.poweroff=3")
	if !e.img.HasAgent {
		testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	events, err := e.b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, false)
	h, _ := decodeHandle(e.h)
	for exited := false; !exited; {
		select {
		case ev := <-events:
			if ev.Kind == sdk.EventExited {
				if ev.Exit != sdk.ExitPoweroff {
					t.Errorf("exit %v (%s), want a power-off (the first SHUTDOWN's reason, not the quit's)", ev.Exit, ev.Detail)
				}
				exited = true
			}
		case <-ctx.Done():
			t.Fatalf("the guest did not power off; console:\n%s", tail(filepath.Join(h.Dir, consoleLog), 3000))
		}
	}
	if st, err := e.b.State(ctx, e.h); err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("State after the exit = %+v, %v: QEMU must be gone, not paused", st, err)
	}
	data, err := e.b.ReadRing(ctx, e.h, 4096)
	if err != nil {
		t.Fatalf("ReadRing after the power-off: %v (the ring's last bytes were lost with QEMU)", err)
	}
	var p ringproto.Parser
	if w, ok := p.Feed(data); !ok || w != ringproto.Stopped {
		t.Errorf("the ring's last bytes %q: last word %q, want %s", data, w, ringproto.Stopped)
	}
	// Taken once: a second read has nothing left, and says the guest is gone.
	if data, err := e.b.ReadRing(ctx, e.h, 4096); !errors.Is(err, sdk.ErrConflict) {
		t.Errorf("second ReadRing = %q, %v; want ErrConflict (not running)", data, err)
	}
}
