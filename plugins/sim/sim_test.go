package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
	"github.com/guestlink/guestlink/plugins/sim/simbackend"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// binDir is a bin/ tree with the plugin at bin/plugins/sim, built by
// TestMain, and a stand-in agent script at bin/guestlink-agent.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "simbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	if err := testbin.Install(testbin.Sim, filepath.Join(dir, "plugins", "sim")); err != nil {
		fmt.Fprintln(os.Stderr, "building the sim plugin:", err)
		return 1
	}
	agent := "#!/bin/sh\n" +
		"# stand-in for guestlink-agent: announce itself on the ring and wait\n" +
		"echo \"$@\" > \"$GUESTLINK_ROOT/agent-args\"\n" +
		"printf 'STARTED\\n' > \"$GUESTLINK_ROOT/dev/virtio-ports/com.canonical.lxd\"\n" +
		"exec sleep 1000\n"
	if err := os.WriteFile(filepath.Join(dir, "guestlink-agent"), []byte(agent), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func pluginPath() string { return filepath.Join(binDir, "plugins", "sim") }

// dataDir returns a short plugin data dir (Unix socket paths are limited)
// whose leftover VMMs are stopped when the test ends.
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "simd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		socks, _ := filepath.Glob(filepath.Join(dir, "guests", "*", "control.sock"))
		for _, s := range socks {
			c := &simvm.Client{Socket: s}
			_ = c.Execute(context.Background(), simvm.CmdQuit, nil, nil)
			testwait.Until(20*time.Second, func() bool {
				_, err := c.Status(context.Background())
				return errors.Is(err, simvm.ErrNotRunning)
			})
		}
		os.RemoveAll(dir)
	})
	return dir
}

func launchOptions(dir string) sdk.LaunchOptions {
	return sdk.LaunchOptions{Env: []string{simbackend.DataDirEnv + "=" + dir}, StartTimeout: time.Minute}
}

// readyCommand is a sim guest that runs the agent and declares Ready once
// the agent reaches the daemon (the kit, in the conformance tests).
const readyCommand = `"$GUESTLINK_AGENT" run & "$GUESTLINK_AGENT" wait-host --timeout 60s && "$GUESTLINK_AGENT" ready; wait`

// conformanceConfig is the kit's configuration for the sim with the real
// agent; agentCommand is the command of the Agent subtest's guest.
func conformanceConfig(t *testing.T, agentCommand string) conformance.Config {
	agent, err := testbin.Path(testbin.Agent)
	if err != nil {
		t.Fatalf("building guestlink-agent: %v", err)
	}
	return conformance.Config{
		PluginPath: pluginPath(),
		Spec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{simbackend.KeyCommand: "exec sleep 1000"}}
		},
		ExitingSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{simbackend.KeyCommand: "exit 0"}}
		},
		AgentSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{simbackend.KeyCommand: agentCommand}}
		},
		Agent:        agent,
		Capabilities: []sdk.Capability{sdk.CapRingBuffer, sdk.CapLinkHybrid, sdk.CapRecover, sdk.CapSnapshot},
		Launch:       launchOptions(dataDir(t)),
	}
}

// TestConformance runs the kit against the sim with the real agent: its
// Agent subtest sees STARTED and CONNECTED through ReadRing and the guest
// declare Ready.
func TestConformance(t *testing.T) {
	if os.Getenv(envBrokenAgent) != "" {
		t.Skip("broken-agent run")
	}
	conformance.Run(t, conformanceConfig(t, readyCommand))
}

// envBrokenAgent selects TestBrokenAgent's guest command, in the child
// process TestKitFailsWithoutAgent runs.
const envBrokenAgent = "SIM_TEST_BROKEN_AGENT"

// TestBrokenAgent is run by TestKitFailsWithoutAgent in a child process:
// the kit's Agent subtest with a guest command that breaks the agent path.
func TestBrokenAgent(t *testing.T) {
	cmd := os.Getenv(envBrokenAgent)
	if cmd == "" {
		t.Skip("only run by TestKitFailsWithoutAgent")
	}
	cfg := conformanceConfig(t, cmd)
	cfg.Timeout = 10 * time.Second
	conformance.Run(t, cfg)
}

// TestKitFailsWithoutAgent checks that the kit's Agent subtest can fail,
// with a message that says what is wrong: a guest that never runs the agent
// (its ring stays empty), and one whose agent runs but that never declares
// Ready.
func TestKitFailsWithoutAgent(t *testing.T) {
	if os.Getenv(envBrokenAgent) != "" {
		t.Skip("broken-agent run")
	}
	for _, tt := range []struct {
		name, command, want string
	}{
		{"no agent", "exec sleep 1000", "the agent's STARTED never reached the plugin's ring"},
		{"never ready", `exec "$GUESTLINK_AGENT" run`, "the guest never declared Ready through its agent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenAgent$/^Agent$", "-test.v")
			cmd.Env = append(os.Environ(), envBrokenAgent+"="+tt.command)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kit passed a sim guest running %q:\n%s", tt.command, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenAgent/Agent") || !strings.Contains(string(out), tt.want) {
				t.Fatalf("the Agent subtest did not fail with %q:\n%s", tt.want, out)
			}
		})
	}
}

func launch(t *testing.T, dir string) *sdk.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.Launch(ctx, pluginPath(), launchOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func waitEvent(t *testing.T, ch <-chan sdk.Event, uuid string, kind sdk.EventKind) sdk.Event {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event stream closed before %v", kind)
			}
			if ev.UUID == uuid && ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %s", kind, uuid)
		}
	}
}

// readRing reads the ring until it returned want in total (the guest's
// write and the ring read race), failing on anything else.
func readRing(t *testing.T, b sdk.Backend, h sdk.Handle, want string) {
	t.Helper()
	var got []byte
	testwait.Until(time.Minute, func() bool {
		data, err := b.ReadRing(ctxT(t), h, 4096)
		if err != nil {
			t.Fatalf("ReadRing: %v", err)
		}
		got = append(got, data...)
		return len(got) >= len(want)
	})
	if string(got) != want {
		t.Fatalf("ring gave %q, want %q", got, want)
	}
}

// TestDefaultAgentSurvivesPluginKill runs the default command (the agent
// found at bin/guestlink-agent next to bin/plugins/sim), kills the plugin
// with SIGKILL, and re-attaches from a new plugin process: the guest keeps
// running, its ring and events flow through the new process.
func TestDefaultAgentSurvivesPluginKill(t *testing.T) {
	dir := dataDir(t)
	first := launch(t, dir)
	b := first.Backend()
	ctx := ctxT(t)
	spec := &sdk.GuestSpec{Name: "agent1", UUID: "6a1e2c3d-0000-4000-8000-000000000001", Config: map[string]string{}}
	events, err := b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	h, st, err := b.Start(ctx, h, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	root := strings.TrimSuffix(st.Details[simbackend.DetailDevlxdSocket], "/dev/lxd/sock")
	waitEvent(t, events, spec.UUID, sdk.EventRingData)
	readRing(t, b, h, "STARTED\n")
	if args, err := os.ReadFile(filepath.Join(root, "agent-args")); err != nil || string(args) != "run\n" {
		t.Fatalf("agent args = %q, %v", args, err)
	}

	if err := syscall.Kill(first.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	if err := syscall.Kill(int(st.PID), 0); err != nil {
		t.Fatalf("vmm %d died with the plugin: %v", st.PID, err)
	}

	second := launch(t, dir)
	b = second.Backend()
	events, err = b.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, rst, err := b.Recover(ctx, h, spec)
	if err != nil || rst.Status != sdk.StatusRunning || rst.PID != st.PID {
		t.Fatalf("Recover = %+v, %v", rst, err)
	}
	// The guest writes again; the new plugin sees it.
	port := filepath.Join(root, "dev", "virtio-ports", simvm.PortCurrent)
	if err := os.WriteFile(port, []byte("CONNECTED\n"), 0); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, spec.UUID, sdk.EventRingData)
	readRing(t, b, h, "CONNECTED\n")
	if _, err := b.Stop(ctx, h, sdk.StopOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, events, spec.UUID, sdk.EventExited)
	if !strings.Contains(ev.Detail, "powerdown") {
		t.Fatalf("EXITED detail = %q", ev.Detail)
	}
	if err := b.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsCrossTheBoundary checks that the sim backend's error kinds reach
// the daemon side intact.
func TestErrorsCrossTheBoundary(t *testing.T) {
	b := launch(t, dataDir(t)).Backend()
	ctx := ctxT(t)
	_, err := b.Create(ctx, &sdk.GuestSpec{Name: "x", UUID: "u", Config: map[string]string{simbackend.KeyRingSize: "1000"}})
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), simbackend.KeyRingSize) {
		t.Fatalf("Create with a bad ring size = %v", err)
	}
	_, err = b.Create(ctx, &sdk.GuestSpec{Name: "x", UUID: "u", Config: map[string]string{"sim.colour": "blue"}})
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "sim.colour") || !strings.Contains(err.Error(), simbackend.KeyLayout) {
		t.Fatalf("Create with an unknown key = %v", err)
	}
}
