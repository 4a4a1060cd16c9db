package simbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

func TestRecoverInNewBackend(t *testing.T) {
	opts := testOptions(t)
	b1 := newBackend(t, opts)
	spec := newSpec("survivor", map[string]string{KeyCommand: `read x < "$GUESTLINK_ROOT/go"; printf 'STARTED\n' > ` + portCmd + `com.canonical.lxd"; exec sleep 1000`})
	h, err := b1.Create(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	hd, _ := decodeHandle(h)
	// The guest waits on this FIFO, so its ring write happens after Recover.
	os.MkdirAll(hd.paths().Root(), 0o755)
	if err := syscall.Mkfifo(filepath.Join(hd.paths().Root(), "go"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, st, err := b1.Start(ctxT(t), h, spec)
	if err != nil {
		t.Fatal(err)
	}
	b1.Close() // the plugin lets go; the guest keeps running

	b2 := newBackend(t, opts)
	evs := watchEvents(t, b2)
	for i := 0; i < 2; i++ { // idempotent
		h2, st2, err := b2.Recover(ctxT(t), h, spec)
		if err != nil || st2.Status != sdk.StatusRunning || st2.PID != st.PID {
			t.Fatalf("Recover #%d = %+v, %v", i, st2, err)
		}
		if hd2, err := decodeHandle(h2); err != nil || hd2.VMMPID != int(st.PID) {
			t.Fatalf("recovered handle = %s, %v", h2, err)
		}
	}
	if err := os.WriteFile(filepath.Join(hd.paths().Root(), "go"), []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	evs.wait(t, sdk.EventRingData, spec.UUID)
	waitReceived(t, h, 8)
	if got, err := b2.ReadRing(ctxT(t), h, 16); err != nil || string(got) != "STARTED\n" {
		t.Fatalf("ReadRing after Recover = %q, %v", got, err)
	}
	if _, err := b2.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	evs.wait(t, sdk.EventExited, spec.UUID)
	if _, st, err := b2.Recover(ctxT(t), h, spec); err != nil || st.Status != sdk.StatusStopped {
		t.Fatalf("Recover of a stopped guest = %+v, %v", st, err)
	}
}

func TestConfigDriveAndEnvironment(t *testing.T) {
	// The backend runs in this process: a canary and a CLI's config dir in
	// its environment must reach neither the VMM nor the guest.
	t.Setenv("GUESTLINK_TEST_CANARY", "from-the-host")
	t.Setenv("GUESTLINK_CONFIG_DIR", "/nonexistent/cli-config")
	opts := testOptions(t)
	agent := filepath.Join(opts.DataDir, "bin", "guestlink-agent")
	os.MkdirAll(filepath.Dir(agent), 0o755)
	if err := os.WriteFile(agent, []byte("#!/bin/sh\nenv > \"$GUESTLINK_ROOT/env\"\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Agent = agent
	b := newBackend(t, opts)
	spec := newSpec("drive", nil) // the default command runs the agent
	spec.Files = []sdk.File{
		{Path: "agent.crt", Mode: 0o644, Data: []byte("CERT")},
		{Path: "agent.key", Mode: 0o600, Data: []byte("KEY")},
		{Path: "server.crt", Mode: 0o644, Data: []byte("SERVER")},
		{Path: "agent.conf", Mode: 0o600, Data: []byte(`{"port":1}`)},
	}
	h, _ := createStart(t, b, spec)
	hd, _ := decodeHandle(h)
	for _, f := range spec.Files {
		name := filepath.Join(hd.Dir, "rootfs/run/guestlink-agent", f.Path)
		fi, err := os.Stat(name)
		data, _ := os.ReadFile(name)
		if err != nil || fi.Mode().Perm() != os.FileMode(f.Mode) || !bytes.Equal(data, f.Data) {
			t.Errorf("config drive %s: %v %v %q", f.Path, fi, err, data)
		}
	}
	var env []byte
	waitFor(t, "the agent's environment", func() bool {
		env, _ = os.ReadFile(filepath.Join(hd.paths().Root(), "env"))
		return bytes.Contains(env, []byte("GUESTLINK_INSTANCE=drive\n"))
	})
	for _, want := range []string{
		"GUESTLINK_ROOT=" + hd.paths().Root() + "\n",
		"GUESTLINK_AGENT_ROOT=" + hd.paths().Root() + "\n",
		"GUESTLINK_AGENT_LINK=hybrid:" + hd.paths().Link() + "\n",
		"GUESTLINK_AGENT=" + agent + "\n",
		"GUESTLINK_AGENT_DEVLXD_SOCKET=" + hd.paths().DevlxdSocket() + "\n",
		"PATH=" + filepath.Dir(agent) + ":" + simvm.SystemPath + "\n",
	} {
		if !bytes.Contains(env, []byte(want)) {
			t.Errorf("agent env lacks %q", want)
		}
	}
	for _, leak := range []string{"GUESTLINK_TEST_CANARY", "GUESTLINK_CONFIG_DIR", sdk.DataDirEnv, sdk.Handshake.MagicCookieKey} {
		if bytes.Contains(env, []byte(leak+"=")) {
			t.Errorf("the host's %s reached the guest:\n%s", leak, env)
		}
	}
	vmmEnv, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", hd.VMMPID))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimRight(string(vmmEnv), "\x00"), "\x00"); !slices.Equal(got, append(simvm.VMMEnv(), simvm.ReadyEnv+"=3")) {
		t.Errorf("VMM environment = %q, want %q and the readiness pipe's fd", got, simvm.VMMEnv())
	}
	if fi, err := os.Stat(filepath.Join(hd.Dir, "control.sock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket %v %v", fi, err)
	}
	if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidInput(t *testing.T) {
	b := newBackend(t, testOptions(t))
	ctx := ctxT(t)
	t.Run("create", func(t *testing.T) {
		for name, spec := range map[string]*sdk.GuestSpec{
			"nil spec":      nil,
			"unknown key":   newSpec("x", map[string]string{"sim.bogus": "1"}),
			"bad ring size": newSpec("x", map[string]string{KeyRingSize: "100"}),
			"bad layout":    newSpec("x", map[string]string{KeyLayout: "qemu"}),
			"escaping file": {Name: "x", UUID: "u", Files: []sdk.File{{Path: "../../etc/x"}}},
			"absolute file": {Name: "x", UUID: "u", Files: []sdk.File{{Path: "/etc/x"}}},
		} {
			t.Run(name, func(t *testing.T) {
				if _, err := b.Create(ctx, spec); !errors.Is(err, sdk.ErrInvalid) {
					t.Fatalf("Create = %v, want ErrInvalid", err)
				}
			})
		}
	})
	t.Run("start without agent", func(t *testing.T) {
		spec := newSpec("noagent", nil)
		h, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Start(ctx, h, spec); !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), KeyAgent) {
			t.Fatalf("Start without agent = %v", err)
		}
		if _, _, err := b.Start(ctx, h, newSpec("noagent", map[string]string{"sim.nope": "1"})); !errors.Is(err, sdk.ErrInvalid) {
			t.Fatalf("Start with an unknown key = %v", err)
		}
	})
	garbage := []sdk.Handle{nil, sdk.Handle("garbage"), sdk.Handle(`{"v":1}`),
		sdk.Handle(`{"v":1,"id":"etc","dir":"/etc"}`), // passes decoding, no guest marker
	}
	for i, h := range garbage {
		t.Run(fmt.Sprintf("handle %d", i), func(t *testing.T) {
			calls := map[string]error{}
			_, _, calls["Start"] = b.Start(ctx, h, newSpec("x", nil))
			_, calls["Stop"] = b.Stop(ctx, h, sdk.StopOptions{})
			calls["Delete"] = b.Delete(ctx, h)
			_, calls["State"] = b.State(ctx, h)
			_, calls["ReadRing"] = b.ReadRing(ctx, h, 16)
			_, calls["LinkEndpoint"] = b.LinkEndpoint(ctx, h)
			_, _, calls["Recover"] = b.Recover(ctx, h, newSpec("x", nil))
			for name, err := range calls {
				if !errors.Is(err, sdk.ErrInvalid) {
					t.Errorf("%s(%q) = %v, want ErrInvalid", name, h, err)
				}
			}
		})
	}
	if _, err := os.Stat("/etc"); err != nil {
		t.Fatal("/etc vanished")
	}
}

func TestInfo(t *testing.T) {
	b := newBackend(t, testOptions(t))
	info, err := b.Info(context.Background())
	if err != nil || info.Name != "sim" || len(info.ConfigPrefixes) != 1 || info.ConfigPrefixes[0] != "sim." {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	for _, c := range []sdk.Capability{sdk.CapRingBuffer, sdk.CapLinkHybrid, sdk.CapRecover} {
		if !info.Has(c) {
			t.Errorf("Info lacks %s", c)
		}
	}
	if info.Has(sdk.CapStateful) {
		t.Error("Info claims stateful")
	}
}

// dead reports whether pid is gone or a zombie: orphans are reaped by
// whatever init the machine has, sometimes slowly.
func dead(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z'
}

func TestConcurrentStart(t *testing.T) {
	b := newBackend(t, testOptions(t))
	spec := newSpec("race", map[string]string{KeyCommand: "exec sleep 1000"})
	h, err := b.Create(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, _, err := b.Start(ctxT(t), h, spec)
			errs <- err
		}()
	}
	var ok, conflict int
	for i := 0; i < n; i++ {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, sdk.ErrConflict):
			conflict++
		default:
			t.Errorf("concurrent Start: %v", err)
		}
	}
	if ok != 1 || conflict != n-1 {
		t.Fatalf("%d Starts succeeded and %d conflicted, want 1 and %d", ok, conflict, n-1)
	}
	if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

func TestPortEvents(t *testing.T) {
	b := newBackend(t, testOptions(t))
	evs := watchEvents(t, b)
	spec := newSpec("ports", map[string]string{KeyCommand: `printf 'STARTED\n' > ` + portCmd + `com.canonical.lxd"; exec sleep 1000`})
	h, _ := createStart(t, b, spec)
	for _, kind := range []sdk.EventKind{sdk.EventPortOpened, sdk.EventPortClosed} {
		if ev := evs.wait(t, kind, spec.UUID); ev.Port != simvm.PortCurrent {
			t.Fatalf("%v event port = %q", kind, ev.Port)
		}
	}
	if _, err := b.Stop(ctxT(t), h, sdk.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

// TestHandleOutsideDataDir checks that a handle naming a guest directory
// outside the backend's data dir (here a real guest of another backend, with
// a valid marker) is refused by every operation and nothing of it is touched.
func TestHandleOutsideDataDir(t *testing.T) {
	ctx := ctxT(t)
	other := newBackend(t, testOptions(t))
	spec := newSpec("foreign", nil)
	h, err := other.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	hd, err := decodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, testOptions(t))
	calls := map[string]error{}
	_, _, calls["Start"] = b.Start(ctx, h, spec)
	_, calls["Stop"] = b.Stop(ctx, h, sdk.StopOptions{Force: true})
	calls["Delete"] = b.Delete(ctx, h)
	_, calls["State"] = b.State(ctx, h)
	_, calls["ReadRing"] = b.ReadRing(ctx, h, 16)
	_, calls["LinkEndpoint"] = b.LinkEndpoint(ctx, h)
	_, _, calls["Recover"] = b.Recover(ctx, h, spec)
	for name, err := range calls {
		if !errors.Is(err, sdk.ErrInvalid) {
			t.Errorf("%s(handle in %s) = %v, want ErrInvalid", name, hd.Dir, err)
		}
	}
	if _, err := os.Stat(markerPath(hd.Dir)); err != nil {
		t.Fatalf("the other backend's guest was touched: %v", err)
	}
}
