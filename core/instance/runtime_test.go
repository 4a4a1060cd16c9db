package instance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestReady(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	devlxd := events.Requestor{Protocol: "devlxd"}
	if err := e.m.SetReady(bg, inst.UUID, true, devlxd); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Ready while stopped: %v", err)
	}
	if err := e.m.SetReady(bg, "nope", true, devlxd); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Ready for an unknown uuid: %v", err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	ready := func() {
		t.Helper()
		if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
			t.Fatal(err)
		}
	}
	ready()
	got := e.get("web1")
	if got.Status != "Ready" || got.StatusCode != 113 || got.Config[KeyReady] != "true" || got.ReadyAt == nil || got.ReadyAt.Before(*got.StartedAt) {
		t.Fatalf("after Ready: %s %d %q ready_at %v", got.Status, got.StatusCode, got.Config[KeyReady], got.ReadyAt)
	}
	firstReady := *got.ReadyAt
	stored, _ := e.store.GetInstance(bg, "web1")
	if stored.Config[KeyReady] != "true" {
		t.Errorf("stored ready flag %q", stored.Config[KeyReady])
	}
	ready() // repeats are announced too
	if got := e.get("web1"); !got.ReadyAt.Equal(firstReady) {
		t.Errorf("a repeated Ready moved ready_at")
	}
	for _, f := range []string{"Running", "running", "Ready", "103"} {
		list, err := e.m.List(bg, ListFilter{Status: f})
		if err != nil || len(list) != 1 {
			t.Errorf("List(status=%s) = %d, %v; want the Ready instance", f, len(list), err)
		}
	}
	if list, _ := e.m.List(bg, ListFilter{Status: "Stopped"}); len(list) != 0 {
		t.Errorf("List(Stopped) has %d", len(list))
	}
	unready := func() {
		t.Helper()
		if err := e.m.SetReady(bg, inst.UUID, false, devlxd); err != nil {
			t.Fatal(err)
		}
	}
	unready()
	unready() // no second unready event
	if got := e.get("web1"); got.Status != "Running" || got.Config[KeyReady] != "false" {
		t.Errorf("after Started: %s %q", got.Status, got.Config[KeyReady])
	}
	want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceReady, events.InstanceReady, events.InstanceUnready}
	if got := e.actions("web1"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	recs, _ := e.store.EventsAfter(bg, 0, 0)
	for _, r := range recs {
		ev := events.Event{Type: r.Type}
		_ = ev
		if strings.Contains(string(r.Body), events.InstanceReady+`"`) && !strings.Contains(string(r.Body), `"protocol":"devlxd"`) {
			t.Errorf("instance-ready without the devlxd requestor: %s", r.Body)
		}
	}
	tl := e.timeline("web1")
	if count(tl, "ready false->true devlxd") != 1 || count(tl, "ready true->true devlxd") != 1 || count(tl, "ready true->false devlxd") != 1 {
		t.Errorf("timeline %v", tl)
	}

	clearedBy := []struct {
		name   string
		clear  func()
		status string
		action string
		hook   string
	}{
		{"stop", func() {
			if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
				t.Fatal(err)
			}
		}, "Stopped", events.InstanceStopped, "stopped web1"},
		{"exit", func() {
			e.be.kill(inst.UUID)
			e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventExited, Time: time.Now()})
		}, "Stopped", events.InstanceStopped, "stopped web1"},
		{"reset", func() {
			e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventReset, Time: time.Now()})
		}, "Running", events.InstanceUnready, "reset web1"},
	}
	for _, tt := range clearedBy {
		t.Run("cleared by "+tt.name, func(t *testing.T) {
			if e.get("web1").Status == "Stopped" {
				if err := e.m.Start(bg, "web1", adminCaller); err != nil {
					t.Fatal(err)
				}
			}
			ready()
			tt.clear()
			got := e.get("web1")
			if got.Status != tt.status || got.Config[KeyReady] != "false" || got.ReadyAt != nil {
				t.Errorf("status %s ready %q ready_at %v", got.Status, got.Config[KeyReady], got.ReadyAt)
			}
			acts := e.actions("web1")
			if last := acts[len(acts)-1]; last != tt.action {
				t.Errorf("last event %s, want %s", last, tt.action)
			}
			hooks := e.hooks.list()
			if last := hooks[len(hooks)-1]; last != tt.hook {
				t.Errorf("last hook %s, want %s", last, tt.hook)
			}
		})
	}
	if n := count(e.actions("web1"), events.InstanceReady); n != 5 {
		t.Errorf("%d instance-ready events, want one per Ready (5)", n)
	}

	t.Run("cleared at daemon start", func(t *testing.T) {
		ready()
		readyAt := *e.get("web1").ReadyAt
		m2 := e.manager()
		n := len(e.hooks.list())
		if err := m2.Init(bg); err != nil {
			t.Fatal(err)
		}
		got, err := m2.Get(bg, "web1")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Config[KeyReady]; ok || got.Status != "Running" || got.ReadyAt != nil {
			t.Errorf("after Init: status %s ready %q", got.Status, got.Config[KeyReady])
		}
		if hooks := e.hooks.list()[n:]; !slices.Equal(hooks, []string{"running web1"}) {
			t.Errorf("hooks after Init %v", hooks)
		}
		// The agent re-declares Ready to the new daemon.
		if err := m2.SetReady(bg, inst.UUID, true, devlxd); err != nil {
			t.Fatal(err)
		}
		got, _ = m2.Get(bg, "web1")
		if got.Status != "Ready" {
			t.Errorf("status %s", got.Status)
		}
		// Time-to-ready survives the daemon restart.
		if got.ReadyAt == nil || got.ReadyAt.Sub(readyAt).Abs() > time.Millisecond {
			t.Errorf("ready_at %v after the re-declaration, want %v", got.ReadyAt, readyAt)
		}
		if tl := e.timeline("web1"); tl[len(tl)-1] != "ready ->true devlxd" {
			t.Errorf("timeline %v", tl)
		}
	})
}

func TestBackendEvents(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	// Events of stopped or unknown guests change nothing.
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventExited})
	e.m.HandleBackendEvent("fake", contract.Event{UUID: "nope", Kind: contract.EventExited})
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventRingData})
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	// An exit from before this boot is stale.
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventExited, Time: time.Now().Add(-time.Hour)})
	// Another backend cannot stop it.
	e.m.HandleBackendEvent("other", contract.Event{UUID: inst.UUID, Kind: contract.EventExited})
	if got := e.get("web1").Status; got != "Running" {
		t.Fatalf("status %s", got)
	}
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventRingData})
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventPortOpened, Port: "com.canonical.lxd"})
	if err := e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventExited, Detail: "qemu: killed by signal 9", Exit: contract.ExitCrash})
	got := e.get("web1")
	if got.Status != "Error" || got.Details["error"] != "qemu: killed by signal 9" || got.Agent.State != AgentNone || got.Link != "" {
		t.Errorf("after a failed exit: %s %v agent %q link %q", got.Status, got.Details, got.Agent.State, got.Link)
	}
	wantHooks := []string{"running web1", "ring-data web1", "port-opened web1", "stopped web1"}
	if h := e.hooks.list(); !slices.Equal(h, wantHooks) {
		t.Errorf("hooks %v, want %v", h, wantHooks)
	}
	tl := e.timeline("web1")
	if tl[len(tl)-1] != "state running->error backend" || !slices.Contains(tl, "agent started-> backend") {
		t.Errorf("timeline %v", tl)
	}
	// An instance in Error can be stopped (cleaned up) and started again.
	if err := e.m.Stop(bg, "web1", StopOptions{Force: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
}

func TestAgentState(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Now()); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("agent state of a stopped instance: %v", err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		state AgentState
		hb    time.Time
		err   error
		event string // "" none
	}{
		{"started", AgentStarted, time.Unix(100, 0), nil, events.InstanceAgentStarted},
		{"heartbeat only", AgentStarted, time.Unix(200, 0), nil, ""},
		{"connected", AgentConnected, time.Time{}, nil, events.InstanceAgentConnected},
		{"lost", AgentLost, time.Time{}, nil, events.InstanceAgentLost},
		{"connected again", AgentConnected, time.Unix(300, 0), nil, events.InstanceAgentConnected},
		{"stopped", AgentStopped, time.Time{}, nil, events.InstanceAgentStopped},
		{"unknown state", AgentState("dancing"), time.Time{}, errdefs.ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.actions("web1")
			tlBefore := e.timeline("web1")
			prev := e.get("web1").Agent
			err := e.m.SetAgentState(bg, inst.UUID, tt.state, tt.hb)
			if !errors.Is(err, tt.err) {
				t.Fatalf("SetAgentState: %v, want %v", err, tt.err)
			}
			after := e.actions("web1")
			got := e.get("web1")
			if tt.event == "" {
				if len(after) != len(before) {
					t.Errorf("events %v", after[len(before):])
				}
				if len(e.timeline("web1")) != len(tlBefore) {
					t.Error("a timeline entry without a state change")
				}
			} else if len(after) != len(before)+1 || after[len(after)-1] != tt.event {
				t.Errorf("events %v, want one %s", after[len(before):], tt.event)
			}
			if tt.err != nil {
				if !cmp.Equal(got.Agent, prev) {
					t.Errorf("agent changed on a bad call: %+v", got.Agent)
				}
				return
			}
			if got.Agent.State != tt.state || got.Agent.Since == nil {
				t.Errorf("agent %+v", got.Agent)
			}
			if !tt.hb.IsZero() && !got.Agent.LastHeartbeat.Equal(tt.hb) {
				t.Errorf("last heartbeat %v, want %v", got.Agent.LastHeartbeat, tt.hb)
			}
			if tt.hb.IsZero() && !cmp.Equal(got.Agent.LastHeartbeat, prev.LastHeartbeat) {
				t.Errorf("a zero heartbeat changed the last heartbeat")
			}
			if list, _ := e.m.List(bg, ListFilter{Agent: string(tt.state)}); len(list) != 1 {
				t.Errorf("List(agent=%s) = %d", tt.state, len(list))
			}
		})
	}
	if tl := e.timeline("web1"); count(tl, "agent connected->lost agent") != 1 {
		t.Errorf("timeline %v", tl)
	}
	if err := e.m.SetAgentState(bg, "nope", AgentStarted, time.Now()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"alive", "dead", "idle"} {
		e.create(n, nil)
	}
	for _, n := range []string{"alive", "dead"} {
		if err := e.m.Start(bg, n, adminCaller); err != nil {
			t.Fatal(err)
		}
	}
	dead := e.get("dead")
	e.be.kill(dead.UUID) // dies while the daemon is down
	m2 := e.manager()
	n := len(e.hooks.list())
	if err := m2.Init(bg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"alive": "Running", "dead": "Stopped", "idle": "Stopped"} {
		got, err := m2.Get(bg, name)
		if err != nil || got.Status != want {
			t.Errorf("%s: %v %v, want %s", name, got.Status, err, want)
		}
	}
	alive, _ := m2.Get(bg, "alive")
	if alive.DevlxdSocket != "/run/recovered/sock" || alive.Link != "hybrid" {
		t.Errorf("recovered view %+v", alive)
	}
	// Guests are recovered in parallel: compare sorted.
	if h := slices.Sorted(slices.Values(e.hooks.list()[n:])); !slices.Equal(h, []string{"running alive", "stopped dead"}) {
		t.Errorf("hooks %v", h)
	}
	tl := e.timeline("dead")
	if tl[len(tl)-1] != "state running->stopped daemon" {
		t.Errorf("timeline %v", tl)
	}
	if acts := e.actions("dead"); acts[len(acts)-1] != events.InstanceStopped {
		t.Errorf("events %v", acts)
	}
	// A plugin restart recovers again; nothing changes for a live guest.
	if err := m2.Recover(bg, "fake"); err != nil {
		t.Fatal(err)
	}
	if err := m2.Recover(bg, "gone"); err != nil {
		t.Errorf("Recover of a backend without instances: %v", err)
	}
	if got, _ := m2.Get(bg, "alive"); got.Status != "Running" || got.Boot != 1 {
		t.Errorf("after a second recover: %s boot %d", got.Status, got.Boot)
	}
}

func TestExitDuringRecover(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	e.be.onRecover = func(uuid string) {
		// The guest was running when Recover looked, and exits before the
		// daemon has recorded what Recover found.
		e.m.HandleBackendEvent("fake", contract.Event{UUID: uuid, Kind: contract.EventExited, Time: time.Now()})
		e.be.onRecover = nil
	}
	n := len(e.hooks.list())
	if err := e.m.Recover(bg, "fake"); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Status != "Stopped" {
		t.Errorf("status %s", got.Status)
	}
	if h := e.hooks.list()[n:]; !slices.Equal(h, []string{"running web1", "stopped web1"}) {
		t.Errorf("hooks %v", h)
	}
	if c := count(e.actions("web1"), events.InstanceStopped); c != 1 {
		t.Errorf("%d instance-stopped events", c)
	}
}

func TestInitWithMissingBackend(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	// The daemon restarts without the plugin: it must start anyway.
	m2, err := NewManager(Config{Store: e.store, Backends: fakeBackends{}, Bus: e.bus})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Init(bg); err != nil {
		t.Fatalf("Init with a missing backend: %v", err)
	}
	got, _ := m2.Get(bg, "web1")
	if got.Status != "Error" || !strings.Contains(got.Details["error"], "available") {
		t.Errorf("status %s details %v", got.Status, got.Details)
	}
	// With the plugin back, the guest (still running) is found again.
	m3 := e.manager()
	if err := m3.Init(bg); err != nil {
		t.Fatal(err)
	}
	if got, _ := m3.Get(bg, "web1"); got.Status != "Running" || got.Boot != 1 {
		t.Errorf("status %s boot %d", got.Status, got.Boot)
	}
	if tl := e.timeline("web1"); tl[len(tl)-1] != "state error->running daemon" {
		t.Errorf("timeline %v", tl)
	}
}

// RecordHeartbeat stores only the time of an unchanged state's heartbeat
// and leaves everything else (a new state, a refusal, an unknown guest) to
// SetAgentState.
func TestRecordHeartbeat(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	e.get("web1") // loads the manager
	if e.m.RecordHeartbeat(inst.UUID, AgentStarted, time.Unix(50, 0)) {
		t.Error("a stopped instance's agent was recorded started")
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if e.m.RecordHeartbeat(inst.UUID, AgentStarted, time.Unix(100, 0)) {
		t.Fatal("a new state went past SetAgentState")
	}
	if err := e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	before, tl := e.actions("web1"), e.timeline("web1")
	if !e.m.RecordHeartbeat(inst.UUID, AgentStarted, time.Unix(200, 0)) {
		t.Fatal("an unchanged state's heartbeat was not recorded")
	}
	got := e.get("web1")
	if got.Agent.State != AgentStarted || !got.Agent.LastHeartbeat.Equal(time.Unix(200, 0)) {
		t.Errorf("agent %+v, want started with the heartbeat at 200", got.Agent)
	}
	if len(e.actions("web1")) != len(before) || len(e.timeline("web1")) != len(tl) {
		t.Error("a heartbeat made an event or a timeline entry")
	}
	if e.m.RecordHeartbeat(inst.UUID, AgentConnected, time.Unix(300, 0)) {
		t.Error("a change went past SetAgentState")
	}
	if e.m.RecordHeartbeat(inst.UUID, AgentStarted, time.Time{}) {
		t.Error("a zero heartbeat was recorded")
	}
	if e.m.RecordHeartbeat("nope", AgentStarted, time.Unix(400, 0)) {
		t.Error("an unknown guest's heartbeat was recorded")
	}
}

// TestReadyFromSystemd declares Ready as the daemon does for a guest's
// systemd READY=1 (requestor protocol systemd): the timeline's cause and
// the instance-ready event's requestor say systemd, not devlxd.
func TestReadyFromSystemd(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredReady}, events.Requestor{Protocol: "systemd", Address: "vsock"}); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Status != "Ready" {
		t.Fatalf("after systemd's READY=1: %s", got.Status)
	}
	if tl := e.timeline("web1"); count(tl, "ready false->true systemd") != 1 {
		t.Errorf("timeline %v, want one ready false->true caused by systemd", tl)
	}
	recs, _ := e.store.EventsAfter(bg, 0, 0)
	found := false
	for _, r := range recs {
		if strings.Contains(string(r.Body), events.InstanceReady+`"`) {
			found = strings.Contains(string(r.Body), `"protocol":"systemd"`)
		}
	}
	if !found {
		t.Errorf("no instance-ready event with the systemd requestor")
	}
}

// TestRestoreDeclaration: a declaration the agent hands back to a restarted
// daemon (Declaration.Restore) is recorded while the boot has none (the
// Ready flag cleared at the daemon's start), with its event, and dropped
// once the guest declared meanwhile: an older Ready handed back late never
// overwrites the guest's newer Started, and announces nothing.
func TestRestoreDeclaration(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	devlxd, agent := events.Requestor{Protocol: "devlxd"}, events.Requestor{Protocol: "agent"}
	if err := e.m.SetReady(bg, inst.UUID, true, devlxd); err != nil {
		t.Fatal(err)
	}
	m2 := e.manager() // the daemon restarts: the flag is cleared
	if err := m2.Init(bg); err != nil {
		t.Fatal(err)
	}
	ready := Declaration{State: DeclaredReady, Reason: "ChecksPassed", Restore: true}
	before := count(e.actions("web1"), events.InstanceReady)
	if err := m2.Declare(bg, inst.UUID, ready, agent); err != nil {
		t.Fatal(err)
	}
	if got, _ := m2.Get(bg, "web1"); got.Status != "Ready" || got.Config[KeyReady] != "true" {
		t.Fatalf("after the restore: status %s, ready %q", got.Status, got.Config[KeyReady])
	}
	if n := count(e.actions("web1"), events.InstanceReady); n != before+1 {
		t.Fatalf("%d instance-ready events after the restore, want %d", n, before+1)
	}
	// The guest says Started; a Ready handed back late changes nothing.
	if err := m2.Declare(bg, inst.UUID, Declaration{State: DeclaredStarted}, devlxd); err != nil {
		t.Fatal(err)
	}
	tl := len(e.timeline("web1"))
	acts := len(e.actions("web1"))
	if err := m2.Declare(bg, inst.UUID, ready, agent); err != nil {
		t.Fatalf("a late restore: %v, want nil (dropped)", err)
	}
	if got, _ := m2.Get(bg, "web1"); got.Status != "Running" || got.Config[KeyReady] != "false" {
		t.Fatalf("a late restore overwrote the guest's Started: status %s, ready %q", got.Status, got.Config[KeyReady])
	}
	if n, m := len(e.timeline("web1")), len(e.actions("web1")); n != tl || m != acts {
		t.Fatalf("a late restore wrote %d timeline entries and %d events", n-tl, m-acts)
	}
}
