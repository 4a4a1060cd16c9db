package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// heartbeat is the agent's default ring-word period.
const heartbeat = 5 * time.Second

// TestLifecycle runs one guest through launch, agent connection, Ready
// declarations, stop and start, on each store.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		database func(t *testing.T) []string
	}{
		{"sqlite", func(*testing.T) []string { return nil }},
		{"postgres", func(t *testing.T) []string { return []string{"--database", dbtest.PostgresURL(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDaemon(t, tc.database(t)...)
			lifecycle(t, d, "life-"+tc.name)
		})
	}
}

func lifecycle(t *testing.T, d *daemonProc, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rec := d.record(name)

	// Launch: the agent starts, the daemon advertises, the agent connects.
	g := d.launch(ctx, name, nil, nil)
	rec.wait(ctx, 0, events.InstanceAgentConnected, 1, opTimeout)
	got := rec.since(0)
	// The monitor applies the last complete word of each ring read: when
	// the agent wrote STARTED and CONNECTED between two reads (a loaded
	// machine), only CONNECTED is seen. agent-started is optional, but never
	// after agent-connected.
	wantOrder := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceAgentConnected}
	if !inOrder(got, wantOrder) || (slices.Contains(got, events.InstanceAgentStarted) &&
		!inOrder(got, []string{events.InstanceStarted, events.InstanceAgentStarted, events.InstanceAgentConnected})) {
		t.Errorf("launch events %v do not contain %v in order (with instance-agent-started, if any, before connected)", got, wantOrder)
	}
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.StatusCode != int(status.Running) || inst.Status != "Running" || inst.Ready() {
		t.Errorf("after launch: status %s (%d), ready %v; want Running (103), not ready", inst.Status, inst.StatusCode, inst.Ready())
	}
	// Runtime-only changes (agent states) reach the timeline just after
	// their events are published: poll.
	// As above, "started" may be missed, never "connected".
	wantSteps := []string{string(api.AgentConnected)}
	if slices.Contains(got, events.InstanceAgentStarted) {
		wantSteps = []string{string(api.AgentStarted), string(api.AgentConnected)}
	}
	var agentSteps []string
	var tl []api.TimelineEntry
	testwait.Until(opTimeout, func() bool {
		if tl, err = d.client.Timeline(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
		agentSteps = agentSteps[:0]
		for _, e := range tl {
			if e.Kind == "agent" {
				agentSteps = append(agentSteps, e.To)
			}
		}
		return inOrder(agentSteps, wantSteps)
	})
	if !inOrder(agentSteps, wantSteps) {
		t.Errorf("timeline agent steps %v, want %v (timeline %+v)", agentSteps, wantSteps, tl)
	}
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0", ""); !strings.Contains(string(a.body), `"state":"Started"`) {
		t.Errorf("devlxd GET /1.0 before Ready: %d %s", a.status, a.body)
	}

	// Ready: status 113 and an instance-ready event from devlxd.
	mark := rec.mark()
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Status == "Ready" && i.Ready()
	})
	rec.wait(ctx, mark, events.InstanceReady, 1, opTimeout)
	for _, ev := range rec.eventsSince(mark) {
		var lc api.EventLifecycle
		if err := json.Unmarshal(ev.Metadata, &lc); err != nil {
			t.Fatal(err)
		}
		if lc.Action != events.InstanceReady {
			continue
		}
		if lc.Source != "/1.0/instances/"+name || lc.Requestor == nil || lc.Requestor.Protocol != "devlxd" {
			t.Errorf("instance-ready event: source %q, requestor %+v; want /1.0/instances/%s by devlxd", lc.Source, lc.Requestor, name)
		}
	}
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0", ""); !strings.Contains(string(a.body), `"state":"Ready"`) {
		t.Errorf("devlxd GET /1.0 when Ready: %d %s", a.status, a.body)
	}

	// Every Ready declaration emits instance-ready again.
	mark = rec.mark()
	agentCommand(ctx, t, g, "ready")
	agentCommand(ctx, t, g, "ready")
	rec.wait(ctx, mark, events.InstanceReady, 2, opTimeout)

	// Started: Running again, instance-unready and no instance-ready.
	mark = rec.mark()
	agentCommand(ctx, t, g, "started")
	d.waitInstance(ctx, name, "Running after started", opTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Running) && !i.Ready()
	})
	rec.wait(ctx, mark, events.InstanceUnready, 1, opTimeout)

	// Ready again; the first instance-ready after "started" must be this
	// declaration's (events arrive in order).
	agentCommand(ctx, t, g, "ready")
	rec.wait(ctx, mark, events.InstanceReady, 1, opTimeout)
	after := rec.since(mark)
	if n := count(after, events.InstanceReady); n != 1 || !inOrder(after, []string{events.InstanceUnready, events.InstanceReady}) {
		t.Errorf("events after PATCH Started then Ready: %v; want instance-unready, then one instance-ready", after)
	}
	d.waitInstance(ctx, name, "Ready again", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })

	// Stop while Ready: Stopped and the flag false.
	mark = rec.mark()
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Timeout: 30}); err != nil {
		t.Fatalf("stopping %s: %v", name, err)
	}
	inst = d.waitInstance(ctx, name, "Stopped", opTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Stopped)
	})
	if v := inst.Config["volatile.last_state.ready"]; v != "false" {
		t.Errorf("after stop volatile.last_state.ready = %q, want \"false\"", v)
	}
	rec.wait(ctx, mark, events.InstanceStopped, 1, opTimeout)

	// Start again: Running, not Ready, until the guest says so.
	mark = rec.mark()
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStart}); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	inst = d.waitInstance(ctx, name, "agent connected after start", agentTimeout, func(i *api.Instance) bool {
		return i.Boot == 2 && i.Agent.State == api.AgentConnected
	})
	if inst.StatusCode != int(status.Running) || inst.Ready() {
		t.Errorf("after start: status %s (%d), ready %v; want Running, not ready", inst.Status, inst.StatusCode, inst.Ready())
	}
	if n := count(rec.since(mark), events.InstanceReady); n != 0 {
		t.Errorf("instance-ready emitted after a fresh start without a declaration: %v", rec.since(mark))
	}
}

// inOrder reports whether want occurs in got as a subsequence.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestRestartClearsReady checks that a reboot clears Ready, and that the
// guest is Ready again only once it declares it.
func TestRestartClearsReady(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "reboot1"
	rec := d.record(name)
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	// The status is visible a moment before its event is delivered: wait
	// for the event, or it would count as one after the mark.
	rec.wait(ctx, 0, events.InstanceReady, 1, opTimeout)

	mark := rec.mark()
	d.cli(ctx, "restart", name)
	inst := d.waitInstance(ctx, name, "agent connected after restart", agentTimeout, func(i *api.Instance) bool {
		return i.Boot == 2 && i.Agent.State == api.AgentConnected
	})
	if inst.StatusCode != int(status.Running) || inst.Ready() {
		t.Errorf("after restart: status %s (%d), volatile.last_state.ready %q; want Running, not ready",
			inst.Status, inst.StatusCode, inst.Config["volatile.last_state.ready"])
	}
	// The agent re-declares a state before confirming an advertisement, so
	// the connected event is a barrier for a wrong instance-ready.
	rec.wait(ctx, mark, events.InstanceAgentConnected, 1, opTimeout)
	if n := count(rec.since(mark), events.InstanceReady); n != 0 {
		t.Errorf("instance-ready after reboot without a declaration: %v", rec.since(mark))
	}
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0", ""); !strings.Contains(string(a.body), `"state":"Started"`) {
		t.Errorf("devlxd GET /1.0 after reboot: %d %s", a.status, a.body)
	}
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready after declaring", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
}

// TestDaemonKilled kills the daemon with SIGKILL while a guest is Ready and
// restarts it on the same state directory.
func TestDaemonKilled(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "crash1"
	rec := d.record(name)
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	if _, err := d.client.UpdateConfig(ctx, name, map[string]string{"user.acked": "before the kill"}, nil); err != nil {
		t.Fatal(err)
	}
	vmm := vmmPID(t, g.dir)
	agents := agentPIDs(g.root)
	if len(agents) != 1 {
		t.Fatalf("want one agent in %s, found %v", g.root, agents)
	}
	rec.wait(ctx, 0, events.InstanceUpdated, 1, opTimeout)
	lastID := rec.lastID()
	// devlxd's session ticket keys: the restarted daemon restores them (the
	// agent's ticket resumes on it), it does not make new ones.
	ticketKeys := filepath.Join(d.stateDir, "pki", "devlxd-ticket-keys")
	keysBefore, err := os.ReadFile(ticketKeys)
	if err != nil {
		t.Fatal(err)
	}

	d.kill()
	if !alive(vmm) || !alive(agents[0]) {
		t.Fatalf("after SIGKILL of the daemon: VMM %d alive %v, agent %d alive %v", vmm, alive(vmm), agents[0], alive(agents[0]))
	}
	// The old plugin dies with its daemon (it watches its parent).
	waitGone(ctx, t, "the old sim plugin", func() bool { return len(pluginProcs(d.stateDir)) == 0 })

	restarted := time.Now()
	d.start()
	rec2 := d.recordSince(name, lastID)
	inst := d.waitInstance(ctx, name, "Ready again after the daemon restart", heartbeat+10*time.Second, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	t.Logf("Ready again %v after the daemon was started", time.Since(restarted).Round(time.Millisecond))
	if got := inst.Config["user.acked"]; got != "before the kill" {
		t.Errorf("user.acked after restart = %q, want the value acknowledged before the kill", got)
	}
	if vmmPID(t, g.dir) != vmm || !alive(agents[0]) {
		t.Errorf("the guest was disturbed: VMM %d -> %d, agent %d alive %v", vmm, vmmPID(t, g.dir), agents[0], alive(agents[0]))
	}
	if ps := agentPIDs(g.root); len(ps) != 1 || ps[0] != agents[0] {
		t.Errorf("agent processes after restart %v, want the same single agent %d", ps, agents[0])
	}
	// The restarted daemon cleared the flag at start and learned it back
	// from the agent's re-declaration after its advertisement.
	second := d.log()[strings.LastIndex(d.log(), "=== test: starting guestlinkd"):]
	if !strings.Contains(second, "ready_cleared=1") {
		t.Errorf("the restarted daemon's log does not say it cleared one ready flag:\n%s", second)
	}
	rec2.wait(ctx, 0, events.InstanceAgentConnected, 1, opTimeout)
	rec2.wait(ctx, 0, events.InstanceReady, 1, opTimeout)
	if keysAfter, err := os.ReadFile(ticketKeys); err != nil || !bytes.Equal(keysAfter, keysBefore) {
		t.Errorf("the ticket keys after the restart (err %v) are not the ones before: restored keys are not rewritten within their period", err)
	}
	if n := len(pluginProcs(d.stateDir)); n != 1 {
		t.Errorf("%d sim plugin processes after the restart, want 1", n)
	}
}

// pluginProcs returns the sim plugin processes (not VMMs) of a state dir.
func pluginProcs(stateDir string) []proc {
	return findProcs(func(cmdline, environ string) bool {
		return strings.TrimRight(cmdline, "\x00") == binDir+"/plugins/sim" && strings.Contains(environ, stateDir)
	})
}

// waitGone polls cond for up to 15 s.
func waitGone(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: condition not reached within 15s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestPluginKilled kills the sim plugin with SIGKILL: guests keep running,
// the daemon restarts the plugin and recovers them.
func TestPluginKilled(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "plug1"
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	vmm := vmmPID(t, g.dir)
	pluginPID := simBackend(ctx, t, d).PID
	if pluginPID == 0 {
		t.Fatal("the sim backend reports no pid")
	}
	if err := syscall.Kill(pluginPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	var b api.Backend
	if !testwait.Until(opTimeout, func() bool {
		b = simBackend(ctx, t, d)
		return b.Restarts == 1 && b.Health == "healthy" && b.PID != pluginPID && b.PID != 0
	}) {
		t.Fatalf("sim backend not restarted within %v: %+v", opTimeout, b)
	}
	var listed []api.Backend
	if err := json.Unmarshal([]byte(d.cli(ctx, "backends", "--format", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	// The e2e plugin dir also holds fleet, which the kill must not touch.
	byName := map[string]api.Backend{}
	for _, b := range listed {
		byName[b.Name] = b
	}
	if s := byName["sim"]; len(listed) != 2 || s.Restarts != 1 || s.Health != "healthy" || byName["fleet"].Restarts != 0 {
		t.Errorf("guestlink backends: %+v, want sim healthy with restarts=1 and fleet not restarted", listed)
	}
	if !alive(vmm) || vmmPID(t, g.dir) != vmm {
		t.Fatalf("the guest's VMM %d did not survive the plugin's death", vmm)
	}
	d.waitInstance(ctx, name, "still Ready after the plugin restart", opTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready)
	})
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Timeout: 30}); err != nil {
		t.Fatalf("stopping %s after the plugin restart: %v", name, err)
	}
	d.waitInstance(ctx, name, "Stopped", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Stopped) })
	waitGone(ctx, t, "the stopped guest's VMM", func() bool { return !alive(vmm) })
}

// simBackend returns the sim entry of GET /1.0/backends.
func simBackend(ctx context.Context, t *testing.T, d *daemonProc) api.Backend {
	t.Helper()
	list, err := d.client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if b.Name == "sim" {
			return b
		}
	}
	t.Fatalf("no sim backend in %+v", list)
	return api.Backend{}
}

// TestAgentKilled kills the agent inside a guest that keeps running: the
// daemon declares it lost after three missed heartbeats.
func TestAgentKilled(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "lost1"
	rec := d.record(name)
	// The agent is not the guest's main process, so the guest outlives it.
	g := d.launch(ctx, name, map[string]string{"sim.command": `"$GUESTLINK_AGENT" run & exec sleep 100000`}, nil)
	agents := agentPIDs(g.root)
	if len(agents) != 1 {
		t.Fatalf("want one agent in %s, found %v", g.root, agents)
	}
	mark := rec.mark()
	killed := time.Now()
	if err := syscall.Kill(agents[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	inst := d.waitInstance(ctx, name, "agent lost", 3*heartbeat+15*time.Second, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentLost
	})
	t.Logf("agent lost %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	rec.wait(ctx, mark, events.InstanceAgentLost, 1, opTimeout)
	if inst.StatusCode != int(status.Running) {
		t.Errorf("guest status after losing its agent: %s, want Running", inst.Status)
	}
}

// TestGuestReboot reboots a Ready guest from inside (a VMM system_reset, as
// a guest's reboot is to QEMU): Ready is cleared, and a declaration of the
// previous boot is not resurrected when the daemon restarts afterwards.
func TestGuestReboot(t *testing.T) {
	t.Parallel()
	d := newDaemon(t) // first: it may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "reset1"
	rec := d.record(name)
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	rec.wait(ctx, 0, events.InstanceReady, 1, opTimeout) // delivered, so not counted after the mark
	oldAgents := agentPIDs(g.root)

	mark := rec.mark()
	if err := simvm.NewClient(simvm.Paths{Dir: g.dir}).Execute(ctx, simvm.CmdSystemReset, nil, nil); err != nil {
		t.Fatalf("system_reset of %s: %v", name, err)
	}
	rec.wait(ctx, mark, events.InstanceAgentConnected, 1, agentTimeout)
	inst := d.waitInstance(ctx, name, "connected after the reset", opTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected
	})
	if inst.StatusCode != int(status.Running) || inst.Ready() {
		t.Errorf("after a guest reboot: status %s, volatile.last_state.ready %q; want Running, not ready",
			inst.Status, inst.Config["volatile.last_state.ready"])
	}
	if n := count(rec.since(mark), events.InstanceReady); n != 0 {
		t.Errorf("instance-ready after a guest reboot without a declaration: %v", rec.since(mark))
	}
	if ps := agentPIDs(g.root); len(ps) != 1 || slices.Equal(ps, oldAgents) {
		t.Errorf("agents after the reset %v (before %v): want one new agent", ps, oldAgents)
	}

	// A new daemon advertises itself; the agent must not re-declare the
	// previous boot's Ready.
	lastID := rec.lastID()
	d.kill()
	d.start()
	rec2 := d.recordSince(name, lastID)
	rec2.wait(ctx, 0, events.InstanceAgentConnected, 1, heartbeat+10*time.Second)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.StatusCode != int(status.Running) || count(rec2.since(0), events.InstanceReady) != 0 {
		t.Errorf("after reboot and daemon restart: status %s, events %v; the previous boot's Ready came back",
			inst.Status, rec2.since(0))
	}
}
