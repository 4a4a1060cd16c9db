package instance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestStartStop(t *testing.T) {
	e := newEnv(t)
	e.create("web1", map[string]string{"user.x": "y"})
	if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("stopping a stopped instance: %v", err)
	}
	before := time.Now().UTC()
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	inst := e.get("web1")
	if inst.Status != "Running" || inst.StatusCode != 103 || inst.Boot != 1 {
		t.Errorf("after start: %s %d boot %d", inst.Status, inst.StatusCode, inst.Boot)
	}
	if inst.StartedAt == nil || inst.StartedAt.Before(before.Add(-time.Second)) {
		t.Errorf("started_at %v", inst.StartedAt)
	}
	if inst.Config[KeyReady] != "false" || inst.Ready() || inst.ReadyAt != nil {
		t.Errorf("a fresh boot is Ready: %q %v", inst.Config[KeyReady], inst.ReadyAt)
	}
	if inst.Link != "hybrid" || inst.DevlxdSocket != "/run/web1/sock" || inst.Details["devlxd_socket"] == "" {
		t.Errorf("link %q socket %q details %v", inst.Link, inst.DevlxdSocket, inst.Details)
	}
	if e.files.n.Load() != 1 {
		t.Errorf("GuestFiles called %d times", e.files.n.Load())
	}
	e.be.mu.Lock()
	var spec *contract.GuestSpec
	for _, g := range e.be.guests {
		spec = g.spec
	}
	e.be.mu.Unlock()
	if spec == nil || len(spec.Files) != 1 || spec.Config["user.x"] != "y" || spec.UUID != inst.UUID {
		t.Errorf("spec %+v", spec)
	}
	if err := e.m.Start(bg, "web1", adminCaller); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("starting a running instance: %v", err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, adminCaller); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("stateful stop on a backend without it: %v", err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Timeout: time.Second}, adminCaller); err != nil {
		t.Fatal(err)
	}
	inst = e.get("web1")
	if inst.Status != "Stopped" || inst.Link != "" || inst.DevlxdSocket != "" || inst.Boot != 1 {
		t.Errorf("after stop: %+v", inst)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1").Boot; got != 2 {
		t.Errorf("boot %d after the second start", got)
	}
	if err := e.m.Restart(bg, "web1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Boot != 3 || got.Status != "Running" {
		t.Errorf("after restart: boot %d %s", got.Boot, got.Status)
	}
	want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceStopped, events.InstanceStarted, events.InstanceRestarted}
	if got := e.actions("web1"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	wantTL := []string{"state ->stopped api: unix root", "state stopped->running api: unix root", "state running->stopped api: unix root",
		"state stopped->running api: unix root", "state running->stopped api: unix root", "state stopped->running api: unix root"}
	if got := e.timeline("web1"); !slices.Equal(got, wantTL) {
		t.Errorf("timeline\n got %v\nwant %v", got, wantTL)
	}
	if got := e.hooks.list(); !slices.Equal(got, []string{"running web1", "stopped web1", "running web1", "stopped web1", "running web1"}) {
		t.Errorf("hooks %v", got)
	}
	if ep := e.hooks.eps[0]; ep == nil || ep.Kind != contract.LinkHybrid {
		t.Errorf("GuestRunning endpoint %+v", ep)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Restart(bg, "web1", StopOptions{}, adminCaller); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("restarting a stopped instance: %v", err)
	}
	for _, op := range []func() error{
		func() error { return e.m.Start(bg, "nope", adminCaller) },
		func() error { return e.m.Stop(bg, "nope", StopOptions{}, adminCaller) },
		func() error { return e.m.Restart(bg, "nope", StopOptions{}, adminCaller) },
		func() error { return e.m.Delete(bg, "nope", true, adminCaller) },
	} {
		if err := op(); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("operation on a missing instance: %v", err)
		}
	}
}

func TestStartFailure(t *testing.T) {
	tests := []struct {
		name   string
		fail   string
		status string
	}{
		{"guest crashes", "start", "Error"},
		{"bad config", "invalid", "Stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.create("web1", map[string]string{"fake.fail": tt.fail})
			err := e.m.Start(bg, "web1", adminCaller)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			inst := e.get("web1")
			if inst.Status != tt.status || inst.Boot != 0 || inst.Details["error"] == "" {
				t.Errorf("after a failed start: %s boot %d details %v", inst.Status, inst.Boot, inst.Details)
			}
			if got := e.actions("web1"); !slices.Equal(got, []string{events.InstanceCreated, events.InstanceError}) {
				t.Errorf("events %v", got)
			}
			tl, _ := e.m.Timeline(bg, "web1", 0)
			if last := tl[len(tl)-1]; !strings.Contains(last.Detail, "start failed") {
				t.Errorf("timeline %+v", last)
			}
			if len(e.hooks.list()) != 0 {
				t.Errorf("hooks %v", e.hooks.list())
			}
			// Fixing the config lets it start.
			if _, err := e.m.UpdateConfig(bg, "web1", nil, []string{"fake.fail"}, adminCaller); err != nil {
				t.Fatal(err)
			}
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			if got := e.get("web1"); got.Status != "Running" || got.Details["error"] != "" {
				t.Errorf("after a good start: %s %v", got.Status, got.Details)
			}
		})
	}
}

func TestExitDuringOperations(t *testing.T) {
	t.Run("during start", func(t *testing.T) {
		e := newEnv(t)
		e.create("web1", nil)
		e.be.onStart = func(spec *contract.GuestSpec) {
			// The guest dies at once; its exit arrives while Start runs.
			e.be.kill(spec.UUID)
			e.m.HandleBackendEvent("fake", contract.Event{UUID: spec.UUID, Kind: contract.EventExited, Time: time.Now()})
		}
		if err := e.m.Start(bg, "web1", adminCaller); err != nil {
			t.Fatal(err)
		}
		if got := e.get("web1"); got.Status != "Stopped" {
			t.Errorf("status %s after the guest died during start", got.Status)
		}
		want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceStopped}
		if got := e.actions("web1"); !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if h := e.hooks.list(); !slices.Equal(h, []string{"running web1", "stopped web1"}) {
			t.Errorf("hooks %v", h)
		}
	})
	t.Run("during stop", func(t *testing.T) {
		e := newEnv(t)
		e.create("web1", nil)
		if err := e.m.Start(bg, "web1", adminCaller); err != nil {
			t.Fatal(err)
		}
		e.be.onStop = func(uuid string) {
			e.m.HandleBackendEvent("fake", contract.Event{UUID: uuid, Kind: contract.EventExited, Time: time.Now()})
		}
		if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
			t.Fatal(err)
		}
		if n := count(e.actions("web1"), events.InstanceStopped); n != 1 {
			t.Errorf("%d instance-stopped events, want 1", n)
		}
		if got := e.get("web1"); got.Status != "Stopped" {
			t.Errorf("status %s", got.Status)
		}
	})
}

func TestStatefulStop(t *testing.T) {
	e := newEnv(t)
	e.be.stateful = true
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	e.be.mu.Lock()
	var restored bool
	for _, g := range e.be.guests {
		restored = g.spec.RestoreState
	}
	e.be.mu.Unlock()
	if !restored {
		t.Error("the start after a stateful stop did not restore the state")
	}
	tl := e.timeline("web1")
	if last, _ := e.m.Timeline(bg, "web1", 1); len(last) != 1 || last[0].Detail != "restored" {
		t.Errorf("timeline %v, last %+v", tl, last)
	}
}

func TestStatefulRestoreKeepsReady(t *testing.T) {
	tests := []struct {
		name      string
		ready     bool // declared before the stop
		stateful  bool
		wantReady bool
	}{
		{"ready guest restored", true, true, true},
		{"running guest restored", false, true, false},
		{"ready guest stopped statelessly", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.be.stateful = true
			inst := e.create("web1", nil)
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			if tt.ready {
				if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.m.Stop(bg, "web1", StopOptions{Stateful: tt.stateful}, adminCaller); err != nil {
				t.Fatal(err)
			}
			if got := e.get("web1"); got.Ready() || got.Status != "Stopped" {
				t.Fatalf("stopped instance: %s, ready %v", got.Status, got.Ready())
			}
			readyEvents := count(e.actions("web1"), events.InstanceReady)
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			got := e.get("web1")
			if got.Ready() != tt.wantReady {
				t.Errorf("after the start: status %s, ready %v, want ready %v", got.Status, got.Ready(), tt.wantReady)
			}
			if _, ok := got.Config[KeySavedReady]; ok {
				t.Errorf("%s left behind after the start", KeySavedReady)
			}
			if n := count(e.actions("web1"), events.InstanceReady) - readyEvents; (n == 1) != tt.wantReady {
				t.Errorf("%d instance-ready events at the start", n)
			}
			// A second, plain start is a fresh boot: never Ready by itself.
			if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
				t.Fatal(err)
			}
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			if e.get("web1").Ready() {
				t.Error("a plain start after the restore is Ready")
			}
		})
	}
}

func TestStatelessStartIgnoresSavedState(t *testing.T) {
	e := newEnv(t)
	e.be.stateful = true
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.StartWith(bg, "web1", StartOptions{Stateless: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	e.be.mu.Lock()
	var restored bool
	for _, g := range e.be.guests {
		restored = g.spec.RestoreState
	}
	e.be.mu.Unlock()
	if restored {
		t.Error("a stateless start asked the backend to restore the saved state")
	}
	if got := e.get("web1"); got.Ready() || got.Status != "Running" {
		t.Errorf("after a stateless start: %s, ready %v; want Running, not Ready", got.Status, got.Ready())
	}
}
