package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
)

// qemuUserMetaData is appended verbatim to the guest's meta-data.
const qemuUserMetaData = "vendor: acme\nregion: eu\n"

// TestQEMUGuest runs one real VM per QEMU plugin through a real guestlinkd:
// launch (Running, agent started, agent connected, Ready declared by the
// guest's init through /dev/lxd/sock), GET /1.0/meta-data from inside the
// guest, a daemon restart and a SIGKILL of the plugin while the VM runs
// (the QEMU process untouched, Ready restored without guest action), a
// stateful stop and restore under the same layout, and a clean stop; the
// admin event stream and the timeline are checked at each step. The
// guests run one after the other (TCG, 2 cores).
func TestQEMUGuest(t *testing.T) {
	for _, tc := range []struct {
		plugin   string
		ringPort string
	}{
		{"qemu", ringproto.PortCurrent},
		{"qemu-legacy", ringproto.PortLegacy},
	} {
		t.Run(tc.plugin, func(t *testing.T) {
			d, img := newQEMUDaemon(t)
			qemuGuest(t, d, img, tc.plugin, tc.ringPort)
		})
	}
}

func qemuGuest(t *testing.T, d *daemonProc, img qemutest.Image, plugin, ringPort string) {
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	name := "vm-" + plugin
	rec := d.record(name)

	// Launch: Running, agent started, connected, then Ready from the guest.
	cfg := qemuConfig(img, "/1.0/meta-data", map[string]string{"user.meta-data": qemuUserMetaData})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: plugin, Config: cfg, Start: true}); err != nil {
		t.Fatalf("launching %s: %v", name, err)
	}
	inst := d.waitInstance(ctx, name, "Ready", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	rec.wait(ctx, 0, events.InstanceReady, 1, qemuOpTimeout)
	rec.wait(ctx, 0, events.InstanceAgentConnected, 1, qemuOpTimeout)
	// The agent's PATCH reaches the daemon over the link at once, while
	// CONNECTED is read from the ring on a timer: instance-ready may come
	// before instance-agent-connected, never before instance-agent-started.
	got := rec.since(0)
	for _, second := range []string{events.InstanceAgentConnected, events.InstanceReady} {
		want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceAgentStarted, second}
		if !inOrder(got, want) {
			t.Errorf("launch events %v do not contain %v in order", got, want)
		}
	}
	for _, ev := range rec.eventsSince(0) {
		var lc api.EventLifecycle
		if err := json.Unmarshal(ev.Metadata, &lc); err != nil {
			t.Fatal(err)
		}
		if lc.Action == events.InstanceReady && (lc.Requestor == nil || lc.Requestor.Protocol != "devlxd") {
			t.Errorf("instance-ready event requested by %+v, want devlxd", lc.Requestor)
		}
	}
	if inst.Backend != plugin || inst.Link != "serial" || inst.Boot != 1 {
		t.Errorf("instance: backend %q, link %q, boot %d; want %s, serial, 1", inst.Backend, inst.Link, inst.Boot, plugin)
	}
	if inst.Details["ring_port"] != ringPort || inst.Details["link"] != "serial" {
		t.Errorf("backend details %v: want ring_port %s and the serial link", inst.Details, ringPort)
	}
	accel := inst.Details["accel"]
	if accel != qemuvm.AccelTCG && accel != qemuvm.AccelKVM {
		t.Errorf("acceleration %q, want tcg or kvm", accel)
	}
	t.Logf("%s: Ready %v after start (accel %s)", name, inst.ReadyAt.Sub(*inst.StartedAt).Round(time.Millisecond), accel)
	wantAgent := []string{string(api.AgentStarted), string(api.AgentConnected)}
	if steps, tl := timelineSteps(ctx, t, d, name, "agent", wantAgent, qemuOpTimeout); !inOrder(steps, wantAgent) {
		t.Errorf("timeline agent steps %v, want started then connected (timeline %+v)", steps, tl)
	}
	if steps, tl := timelineSteps(ctx, t, d, name, "state", []string{status.PowerStopped + ">" + status.PowerRunning}, qemuOpTimeout); len(steps) == 0 {
		t.Errorf("timeline has no start (timeline %+v)", tl)
	}

	// The guest's own GET /1.0/meta-data through /dev/lxd/sock.
	consoleLog := inst.Details["console_log"]
	if consoleLog == "" {
		t.Fatalf("instance details %v name no console log", inst.Details)
	}
	resp, body := consoleGet(ctx, t, consoleLog, "/1.0/meta-data", qemuOpTimeout)
	wantMeta := "instance-id: " + inst.UUID + "\nlocal-hostname: " + name + "\n" + qemuUserMetaData
	if resp.StatusCode != 200 || string(body) != wantMeta {
		t.Errorf("the guest's GET /1.0/meta-data: %d %q, want 200 %q", resp.StatusCode, body, wantMeta)
	}
	// The same console through the admin API and the CLI (ttyS0 is the
	// console log).
	if out := d.cli(ctx, "console", name, "--show-log"); !strings.Contains(out, "guestlink: GET /1.0/meta-data ") {
		t.Errorf("guestlink console %s --show-log lacks the guest's console line; it printed:\n%s", name, tailString(out, 3000))
	}

	// Daemon restart: QEMU untouched, the agent re-advertised over the
	// serial link, Ready learned back without guest action.
	pid := qemuPID(t, inst.UUID)
	if pid == 0 {
		t.Fatalf("no QEMU process for %s", inst.UUID)
	}
	lastID := rec.lastID()
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("QEMU %d died with the daemon", pid)
	}
	restarted := time.Now()
	d.start()
	rec2 := d.recordSince(name, lastID)
	inst = d.waitInstance(ctx, name, "Ready after the daemon restart", qemuOpTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	t.Logf("%s: Ready again %v after the daemon restart", name, time.Since(restarted).Round(time.Millisecond))
	rec2.wait(ctx, 0, events.InstanceAgentConnected, 1, qemuOpTimeout)
	rec2.wait(ctx, 0, events.InstanceReady, 1, qemuOpTimeout)
	if got := qemuPID(t, inst.UUID); got != pid || inst.Boot != 1 || inst.Link != "serial" {
		t.Errorf("after the daemon restart: QEMU pid %d (was %d), boot %d, link %q; want the same VM on the serial link", got, pid, inst.Boot, inst.Link)
	}

	// The plugin killed: the VM is untouched, recovered and controllable.
	old := backendOf(ctx, t, d, plugin)
	if old.PID == 0 {
		t.Fatalf("backend %s reports no pid: %+v", plugin, old)
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var b api.Backend
	if !testwait.Until(qemuOpTimeout, func() bool {
		b = backendOf(ctx, t, d, plugin)
		return b.Restarts >= 1 && b.Health == string(pluginhost.HealthHealthy) && b.PID != old.PID && b.PID != 0
	}) {
		t.Fatalf("backend %s not restarted within %v: %+v", plugin, qemuOpTimeout, b)
	}
	if got := qemuPID(t, inst.UUID); got != pid {
		t.Fatalf("after the plugin's SIGKILL: QEMU pid %d, want %d", got, pid)
	}
	d.waitInstance(ctx, name, "still Ready after the plugin restart", qemuOpTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})

	// Stateful stop and start under the same layout: the guest resumes
	// (no new boot of the kernel) with its agent, which the daemon sees
	// connected again; the guest stays controllable.
	mark := rec2.mark()
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Stateful: true, Timeout: 60}); err != nil {
		t.Fatalf("stateful stop of %s after the plugin restart: %v", name, err)
	}
	inst = d.waitInstance(ctx, name, "Stopped (stateful)", qemuOpTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Stopped)
	})
	if inst.Ready() {
		t.Errorf("after the stateful stop: ready %v, want false", inst.Ready())
	}
	waitGone(ctx, t, "QEMU after the stateful stop", func() bool { return !alive(pid) })
	// A stopped guest's console is still there to read.
	if out := d.cli(ctx, "console", name); !strings.Contains(out, "guestlink: GET /1.0/meta-data ") {
		t.Errorf("guestlink console %s of the stopped guest lacks its console line; it printed:\n%s", name, tailString(out, 3000))
	}
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatalf("starting %s from its saved state: %v", name, err)
	}
	inst = d.waitInstance(ctx, name, "agent connected after the restore", qemuBootTimeout, func(i *api.Instance) bool {
		return i.Boot == 2 && i.Agent.State == api.AgentConnected
	})
	// The restored memory holds the guest's Ready declaration: the daemon
	// restores the Ready flag it saved with the state (the agent, whose
	// word is still CONNECTED, has no reason to declare it again).
	if !inst.Ready() || inst.StatusCode != int(status.Ready) {
		t.Errorf("after the restore: status %s, ready %v; want Ready, as saved", inst.Status, inst.Ready())
	}
	rec2.wait(ctx, mark, events.InstanceAgentConnected, 1, qemuOpTimeout)
	rec2.wait(ctx, mark, events.InstanceReady, 1, qemuOpTimeout)
	if got := rec2.since(mark); !inOrder(got, []string{events.InstanceStopped, events.InstanceStarted, events.InstanceAgentConnected}) {
		t.Errorf("events of the stateful stop and restore: %v", got)
	}
	if steps, tl := timelineSteps(ctx, t, d, name, "state", []string{"running>stopped", "stopped>running"}, qemuOpTimeout); !hasDetail(tl, "state", "stateful") || !hasDetail(tl, "state", "restored") {
		t.Errorf("timeline state steps %v lack a stateful stop and a restored start (timeline %+v)", steps, tl)
	}
	// A restored guest does not boot again: its agent resumes connected.
	// A new boot's agent would say STARTED first, and could be connected
	// only after an advertisement the daemon sends on reading STARTED.
	if first, tl := firstAgentStep(ctx, t, d, name, 2); first != string(api.AgentConnected) {
		t.Errorf("the restored guest's agent first went to %q, want connected (a new boot?); timeline %+v", first, tl)
	}
	pid = qemuPID(t, inst.UUID)

	// Clean stop (ACPI power button, the agent says STOPPED on its way out).
	mark = rec2.mark()
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Timeout: 60}); err != nil {
		t.Fatalf("stopping %s: %v", name, err)
	}
	inst = d.waitInstance(ctx, name, "Stopped", qemuOpTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Stopped)
	})
	rec2.wait(ctx, mark, events.InstanceStopped, 1, qemuOpTimeout)
	if inst.Ready() || inst.Agent.State != api.AgentNone {
		t.Errorf("after stop: ready %v, agent %q; want not ready, no agent", inst.Ready(), inst.Agent.State)
	}
	waitGone(ctx, t, "the stopped guest's QEMU", func() bool { return !alive(pid) })
	wantStates := []string{"stopped>running", "running>stopped", "stopped>running", "running>stopped"}
	if steps, tl := timelineSteps(ctx, t, d, name, "state", wantStates, qemuOpTimeout); !inOrder(steps, wantStates) {
		t.Errorf("timeline state steps %v, want %v (timeline %+v)", steps, wantStates, tl)
	}
	wantReady := []string{"true", "false"}
	if steps, tl := timelineSteps(ctx, t, d, name, "ready", wantReady, qemuOpTimeout); !inOrder(steps, wantReady) {
		t.Errorf("timeline ready steps %v, want %v (timeline %+v)", steps, wantReady, tl)
	}
	t.Logf("guestlink info %s:\n%s", name, d.cli(ctx, "info", name))
}

// hasDetail reports whether the timeline has an entry of kind whose detail
// is detail.
func hasDetail(tl []api.TimelineEntry, kind, detail string) bool {
	for _, e := range tl {
		if e.Kind == kind && e.Detail == detail {
			return true
		}
	}
	return false
}

// TestQEMUStateAcrossLayouts saves a guest's state under the current layout
// and restores it through the real plugin binaries: qemu-legacy refuses it
// before starting QEMU, with ErrConflict across gRPC and an error naming
// both layouts; qemu restores it. The daemon keeps an instance on the
// backend it was created with, so this is tested at the plugin level.
func TestQEMUStateAcrossLayouts(t *testing.T) {
	img := qemutest.RequiresQEMU(t)
	binaries(t)
	dir := qemuPlugins(t)
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	guests, err := os.MkdirTemp("", "glqx")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(guests)
	sums, err := pluginhost.ReadChecksums(filepath.Join(dir, pluginhost.SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	launch := func(name string) sdk.Backend {
		t.Helper()
		sum, ok := sums[name]
		if !ok {
			t.Fatalf("no checksum for %s in %v", name, sums)
		}
		c, err := sdk.Launch(ctx, filepath.Join(dir, name), sdk.LaunchOptions{Checksum: sum, Env: []string{qemuvm.EnvDir + "=" + guests}})
		if err != nil {
			t.Fatalf("launching plugin %s: %v", name, err)
		}
		t.Cleanup(c.Kill)
		return c.Backend()
	}
	current, legacy := launch("qemu"), launch("qemu-legacy")

	uuid := newTestUUID(t)
	spec := &sdk.GuestSpec{Name: "xlayout", UUID: uuid, Config: qemuConfig(img, "", nil)}
	h, err := current.Create(ctx, spec)
	if err != nil {
		t.Fatalf("creating the guest: %v", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if _, err := current.Stop(sctx, h, sdk.StopOptions{Force: true}); err != nil {
			t.Errorf("cleanup stop: %v", err)
		}
		if err := current.Delete(sctx, h); err != nil {
			t.Errorf("cleanup delete: %v", err)
		}
	}()
	if h2, st, err := current.Start(ctx, h, spec); err != nil || st.Status != sdk.StatusRunning {
		t.Fatalf("starting the guest: %+v %v", st, err)
	} else if len(h2) > 0 {
		h = h2
	}
	st, err := current.Stop(ctx, h, sdk.StopOptions{Stateful: true})
	if err != nil || st.Status != sdk.StatusStopped || !st.HasSavedState {
		t.Fatalf("stateful stop = %+v, %v", st, err)
	}

	restore := *spec
	restore.RestoreState = true
	_, _, err = legacy.Start(ctx, h, &restore)
	if !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("restoring under qemu-legacy = %v, want sdk.ErrConflict", err)
	}
	for _, want := range []string{ringproto.PortCurrent, ringproto.PortLegacy, "stateless"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not mention %q", err, want)
		}
	}
	if pid := qemuPID(t, uuid); pid != 0 {
		t.Errorf("the refused restore started QEMU (pid %d)", pid)
	}
	if st, err := legacy.State(ctx, h); err != nil || !st.HasSavedState {
		t.Errorf("after the refusal: state %+v, %v; the saved state must be kept", st, err)
	}

	h2, st, err := current.Start(ctx, h, &restore)
	if err != nil || st.Status != sdk.StatusRunning || st.HasSavedState {
		t.Fatalf("restoring under qemu = %+v, %v; want running, the saved state consumed", st, err)
	}
	if len(h2) > 0 {
		h = h2
	}
}

// newTestUUID returns a random RFC 4122 version 4 UUID.
func newTestUUID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	s := hex.EncodeToString(b)
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// firstAgentStep returns the state the agent first went to in boot (as the
// timeline records it, polled until there is one) and the timeline.
func firstAgentStep(ctx context.Context, t *testing.T, d *daemonProc, name string, boot int64) (string, []api.TimelineEntry) {
	t.Helper()
	var step string
	var tl []api.TimelineEntry
	testwait.Until(qemuOpTimeout, func() bool {
		var err error
		if tl, err = d.client.Timeline(ctx, name, 0); err != nil {
			t.Fatalf("timeline of %s: %v", name, err)
		}
		for _, e := range tl {
			if e.Boot == boot && e.Kind == "agent" {
				step = e.To
				return true
			}
		}
		return false
	})
	return step, tl
}
