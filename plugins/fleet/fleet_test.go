package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/fleet/fleetbackend"
	"github.com/guestlink/guestlink/plugins/fleet/fleethost"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/conformance"
)

// binDir holds the plugin at plugins/fleet, built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fleetbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	if err := testbin.Install(testbin.Fleet, filepath.Join(dir, "plugins", "fleet")); err != nil {
		fmt.Fprintln(os.Stderr, "building the fleet plugin:", err)
		return 1
	}
	return m.Run()
}

func pluginPath() string { return filepath.Join(binDir, "plugins", "fleet") }

// testDataDir returns a short data dir whose fleet host is stopped, and
// waited for, when the test ends.
func testDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleetd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for k := fleethost.MaxHosts - 1; k >= 0; k-- {
			stopHost(t, fleethost.ShardDir(filepath.Join(dir, "fleet"), k))
		}
		os.RemoveAll(dir)
	})
	return dir
}

// stopHost signals the host of dir, if one runs, and waits for its lock.
func stopHost(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, fleethost.PIDName))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !testwait.Until(60*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Errorf("fleet host %d did not exit", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestConformance(t *testing.T) {
	dir := testDataDir(t)
	conformance.Run(t, conformance.Config{
		PluginPath: pluginPath(),
		Spec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid}
		},
		ExitingSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{fleetbackend.KeyCrashAfter: "1s"}}
		},
		// The fleet's guests run the agent in the plugin's process (no
		// binary) and declare Ready fleet.ready_after after it started.
		AgentSpec: func(name, uuid string) *sdk.GuestSpec {
			return &sdk.GuestSpec{Name: name, UUID: uuid, Config: map[string]string{fleetbackend.KeyReadyAfter: "0s"}}
		},
		Capabilities: []sdk.Capability{sdk.CapRingBuffer, sdk.CapLinkHybrid, sdk.CapRecover},
		Launch:       sdk.LaunchOptions{Env: []string{sdk.DataDirEnv + "=" + dir}, StartTimeout: time.Minute},
	})
}

// TestHostLifetime: the plugin's proxy starts a host; a guest keeps it
// running with no plugin connected (guests outlive plugins); once the guest
// is stopped and the last plugin gone, the host exits by itself.
func TestHostLifetime(t *testing.T) {
	dir := filepath.Join(testDataDir(t), "fleet")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, conn, err := fleethost.Connect(ctx, dir, pluginPath())
	if err != nil {
		t.Fatal(err)
	}
	pid := hostPID(t, dir)
	spec := &sdk.GuestSpec{Name: "keep", UUID: "8d0f7f1e-8a3b-4d6c-9a56-0f1d2e3c4b5a"}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Start(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	b, conn, err = fleethost.Connect(ctx, dir, pluginPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := hostPID(t, dir); got != pid {
		t.Fatalf("a second plugin found host %d, want the running host %d", got, pid)
	}
	st, err := b.State(ctx, h)
	if err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("guest after its plugin went away: %+v, %v; want running", st, err)
	}
	if _, err := b.Stop(ctx, h, sdk.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if !testwait.Until(time.Minute, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatalf("idle host %d did not exit", pid)
	}
}

func hostPID(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, fleethost.PIDName))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestShards: with one guest per host, three guests run in three host
// processes (each with its own data dir); every call reaches the guest's
// own host and the proxy's event stream merges all of them.
func TestShards(t *testing.T) {
	dir := filepath.Join(testDataDir(t), "fleet")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := fleethost.NewProxy(dir, pluginPath())
	p.PerHost = 1
	defer p.Close()
	evs, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	uuids := []string{
		"8d0f7f1e-8a3b-4d6c-9a56-0f1d2e3c4b50",
		"8d0f7f1e-8a3b-4d6c-9a56-0f1d2e3c4b51",
		"8d0f7f1e-8a3b-4d6c-9a56-0f1d2e3c4b52",
	}
	var handles []sdk.Handle
	pids := map[int]bool{}
	for i, uuid := range uuids {
		spec := &sdk.GuestSpec{Name: "s" + strconv.Itoa(i), UUID: uuid,
			Config: map[string]string{fleetbackend.KeyCrashAfter: "300ms", fleetbackend.KeyJitter: "0"}}
		h, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(h), "{") || !strings.Contains(string(h), fleethost.ShardDir(dir, i)+"/guests/") {
			t.Fatalf("guest %d: handle %s is not in shard %s", i, h, fleethost.ShardDir(dir, i))
		}
		pids[hostPID(t, fleethost.ShardDir(dir, i))] = true
		if h, _, err = p.Start(ctx, h, spec); err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	if len(pids) != len(uuids) {
		t.Fatalf("%d guests ran in %d host processes, want one each", len(uuids), len(pids))
	}
	exited := map[string]bool{}
	for len(exited) < len(uuids) {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("event stream ended")
			}
			if ev.Kind == sdk.EventExited {
				exited[ev.UUID] = true
			}
		case <-ctx.Done():
			t.Fatalf("exit events of %d of %d guests", len(exited), len(uuids))
		}
	}
	for _, h := range handles {
		st, err := p.State(ctx, h)
		if err != nil || st.Status == sdk.StatusRunning {
			t.Fatalf("state of a crashed guest: %+v, %v", st, err)
		}
		if err := p.Delete(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
}
