package instance

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
)

// cond returns the condition typ of inst.
func cond(t *testing.T, inst *Instance, typ string) Condition {
	t.Helper()
	for _, c := range inst.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("instance %s has no condition %s: %+v", inst.Name, typ, inst.Conditions)
	return Condition{}
}

func TestConditions(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	devlxd := events.Requestor{Protocol: "devlxd"}
	got := e.get("web1")
	if len(got.Conditions) != 3 {
		t.Fatalf("conditions of a new instance: %+v", got.Conditions)
	}
	for _, c := range got.Conditions {
		if c.Status != CondFalse || c.LastTransitionTime.IsZero() {
			t.Errorf("stopped instance: %+v", c)
		}
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	type want struct{ status, reason, message string }
	tests := []struct {
		name     string
		do       func() error
		ready    want
		degraded want
		agent    want
		status   string
	}{
		{"started", func() error { return nil },
			want{CondFalse, ReasonNotDeclared, "the guest has not declared Ready"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondFalse, ReasonNoAgent, "no agent seen this boot"}, "Running"},
		{"agent connected", func() error { return e.m.SetAgentState(bg, inst.UUID, AgentConnected, time.Time{}) },
			want{CondFalse, ReasonNotDeclared, "the guest has not declared Ready"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"}, "Running"},
		{"started with a reason", func() error {
			return e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredStarted, Reason: "ProbeFailed", Message: "http://127.0.0.1:8081/healthz: connection refused"}, devlxd)
		}, want{CondFalse, "ProbeFailed", "http://127.0.0.1:8081/healthz: connection refused"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"}, "Running"},
		{"ready without reason", func() error { return e.m.SetReady(bg, inst.UUID, true, devlxd) },
			want{CondTrue, ReasonGuestDeclaredReady, ""}, want{CondFalse, ReasonNotDegraded, ""}, want{CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"}, "Ready"},
		{"degraded", func() error {
			return e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredDegraded, Reason: "UnitsFailed", Message: "nginx.service"}, devlxd)
		}, want{CondFalse, "UnitsFailed", "nginx.service"}, want{CondTrue, "UnitsFailed", "nginx.service"}, want{CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"}, "Running"},
		{"ready with a reason", func() error {
			return e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredReady, Reason: "ProbeSucceeded", Message: "tcp 127.0.0.1:22"}, devlxd)
		}, want{CondTrue, "ProbeSucceeded", "tcp 127.0.0.1:22"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondTrue, ReasonAgentConnected, "the daemon holds a link to the agent"}, "Ready"},
		{"agent lost", func() error { return e.m.SetAgentState(bg, inst.UUID, AgentLost, time.Time{}) },
			want{CondTrue, "ProbeSucceeded", "tcp 127.0.0.1:22"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondFalse, ReasonAgentLost, "the agent stopped answering"}, "Ready"},
		{"stopped", func() error { return e.m.Stop(bg, "web1", StopOptions{}, adminCaller) },
			want{CondFalse, ReasonInstanceNotRunning, "the instance does not run"}, want{CondFalse, ReasonNotDegraded, ""}, want{CondFalse, ReasonInstanceNotRunning, "the instance does not run"}, "Stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.get("web1")
			if err := tt.do(); err != nil {
				t.Fatal(err)
			}
			got := e.get("web1")
			if got.Status != tt.status {
				t.Errorf("status %s, want %s", got.Status, tt.status)
			}
			for typ, w := range map[string]want{CondReady: tt.ready, CondDegraded: tt.degraded, CondAgentConnected: tt.agent} {
				c := cond(t, got, typ)
				if c.Status != w.status || c.Reason != w.reason || c.Message != w.message {
					t.Errorf("%s = %s %s %q, want %s %s %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.message)
				}
				if old := cond(t, before, typ); old.Status == c.Status && !old.LastTransitionTime.Equal(c.LastTransitionTime) {
					t.Errorf("%s kept status %s but its transition time moved", typ, c.Status)
				}
			}
		})
	}
}

func TestDeclareInvalid(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Declare(bg, inst.UUID, Declaration{State: "Sleeping"}, events.Requestor{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("unknown state: %v", err)
	}
}

// TestConditionEvents checks that condition changes are announced: on the
// change's own event, or in an instance-condition-changed event.
func TestConditionEvents(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	sub, err := e.bus.Subscribe(events.Filter{Instances: []string{"web1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	devlxd := events.Requestor{Protocol: "devlxd"}
	steps := []struct {
		decl   Declaration
		action string
		want   string // a condition the event must carry
	}{
		{Declaration{State: DeclaredStarted, Reason: "ProbeFailed", Message: "refused"}, InstanceConditionChanged, `"reason":"ProbeFailed"`},
		{Declaration{State: DeclaredReady}, events.InstanceReady, `"status":"True"`},
		{Declaration{State: DeclaredDegraded, Reason: "UnitsFailed"}, events.InstanceUnready, `"type":"Degraded","status":"True","reason":"UnitsFailed"`},
	}
	for _, s := range steps {
		if err := e.m.Declare(bg, inst.UUID, s.decl, devlxd); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-sub.C():
			l, err := ev.Lifecycle()
			if err != nil {
				t.Fatal(err)
			}
			if l.Action != s.action || !strings.Contains(string(ev.Metadata), s.want) {
				t.Errorf("after %+v: event %s", s.decl, ev.Metadata)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no event after %+v", s.decl)
		}
	}
}

func TestReadinessTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		inst := e.create("web1", map[string]string{KeyReadinessTimeout: "30s"})
		e.create("web2", map[string]string{KeyReadinessTimeout: "30s"})
		if err := e.m.Start(bg, "web1", adminCaller); err != nil {
			t.Fatal(err)
		}
		if err := e.m.Start(bg, "web2", adminCaller); err != nil {
			t.Fatal(err)
		}
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if c := cond(t, e.get("web1"), CondReady); c.Reason != ReasonNotDeclared {
			t.Fatalf("before the timeout: %+v", c)
		}
		if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c := cond(t, e.get("web1"), CondReady); c.Status != CondTrue {
			t.Fatalf("Ready in time: %+v", c)
		}
		c := cond(t, e.get("web2"), CondReady)
		if c.Status != CondFalse || c.Reason != ReasonTimeout || !strings.Contains(c.Message, "30s") {
			t.Fatalf("after the timeout: %+v", c)
		}
		if got := e.actions("web2"); got[len(got)-1] != InstanceConditionChanged {
			t.Fatalf("events of web2: %v", got)
		}
		// A stop clears it; the next boot starts a new timeout.
		if err := e.m.Stop(bg, "web2", StopOptions{}, adminCaller); err != nil {
			t.Fatal(err)
		}
		if err := e.m.Start(bg, "web2", adminCaller); err != nil {
			t.Fatal(err)
		}
		if c := cond(t, e.get("web2"), CondReady); c.Reason != ReasonNotDeclared {
			t.Fatalf("after a restart: %+v", c)
		}
		if err := e.m.Stop(bg, "web2", StopOptions{}, adminCaller); err != nil {
			t.Fatal(err)
		}
		// A restarted daemon waits for the agent: no Timeout for a guest
		// that was Ready, even long after its deadline.
		e.m = e.manager()
		if err := e.m.Init(bg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if c := cond(t, e.get("web1"), CondReady); c.Status != CondUnknown || c.Reason != ReasonDaemonRestarted {
			t.Fatalf("after a daemon restart: %+v", c)
		}
		if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReadinessKeys(t *testing.T) {
	tests := []struct {
		key, value, err string
	}{
		{KeyReadinessTimeout, "2m", ""},
		{KeyReadinessTimeout, "soon", "is not a duration"},
		{KeyReadinessTimeout, "10ms", "must be between 1s and 24h0m0s"},
		{KeyProbeHTTP, "http://127.0.0.1:8081/healthz", ""},
		{KeyProbeHTTP, "ftp://x/", "the scheme must be http or https"},
		{KeyProbeHTTP, "http:///x", "has no host"},
		{KeyProbeTCP, "127.0.0.1:22", ""},
		{KeyProbeTCP, "127.0.0.1", "is not HOST:PORT"},
		{KeyProbeTCP, "h:70000", "the port must be a number from 1 to 65535"},
		{KeyProbeExec, "test -e /run/ok", ""},
		{KeyProbeSystemd, "true", ""},
		{KeyProbeSystemd, "yes please", "is not a boolean"},
		{KeyProbePeriod, "5s", ""},
		{KeyProbePeriod, "1ms", "must be between"},
		{KeyProbeTimeout, "2s", ""},
		{KeyProbeSuccessThres, "3", ""},
		{KeyProbeFailureThres, "0", "is not an integer from 1 to 1000"},
		{KeySystemdNotify, "false", ""},
		{KeySystemdNotify, "off", ""},
		{KeySystemdNotify, "never", "is not a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			err := validateKey(tt.key, tt.value, false, backendKeys{})
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, errdefs.ErrInvalid)):
				t.Fatalf("error %v, want %q", err, tt.err)
			}
		})
	}
}

// TestConditionsAfterDaemonRestart checks that a restarted daemon says it
// does not know whether a running guest is Ready until the guest says so.
func TestConditionsAfterDaemonRestart(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	e.m = e.manager()
	if err := e.m.Init(bg); err != nil {
		t.Fatal(err)
	}
	if c := cond(t, e.get("web1"), CondReady); c.Status != CondUnknown || c.Reason != ReasonDaemonRestarted {
		t.Fatalf("after the restart: %+v", c)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	if c := cond(t, e.get("web1"), CondReady); c.Status != CondTrue {
		t.Fatalf("re-declared: %+v", c)
	}
}

// TestProbeFailureAfterReady checks that a guest that was Ready this boot
// and then declares a failing probe (Started, reason ProbeFailed, as the
// agent's probe runner does) reads as a probe failure, never as
// readiness.timeout's "not Ready after start": when it became Ready in
// time, when it became Ready only after the timeout had fired, and when
// the daemon restarted between its Ready and the failure (the first thing
// the restarted daemon hears is the failure, long past the deadline).
func TestProbeFailureAfterReady(t *testing.T) {
	failed := Declaration{State: DeclaredStarted, Reason: "ProbeFailed", Message: "http://127.0.0.1:8081/healthz: connection refused"}
	tests := []struct {
		name          string
		readyAfter    time.Duration // from the start
		restartDaemon bool
	}{
		{"ready in time", 10 * time.Second, false},
		{"ready after the timeout", 40 * time.Second, false},
		{"daemon restarted after ready", 10 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				inst := e.create("web1", map[string]string{KeyReadinessTimeout: "30s"})
				if err := e.m.Start(bg, "web1", adminCaller); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tt.readyAfter)
				synctest.Wait()
				if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
					t.Fatal(err)
				}
				if c := cond(t, e.get("web1"), CondReady); c.Status != CondTrue {
					t.Fatalf("after Ready: %+v", c)
				}
				if tt.restartDaemon {
					e.m = e.manager()
					if err := e.m.Init(bg); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.m.Declare(bg, inst.UUID, failed, events.Requestor{}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Minute) // past any deadline
				synctest.Wait()
				c := cond(t, e.get("web1"), CondReady)
				if c.Status != CondFalse || c.Reason != failed.Reason || c.Message != failed.Message {
					t.Fatalf("after the probe failed: %+v, want False %s %q", c, failed.Reason, failed.Message)
				}
				if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestSystemdNotifyEnabled: systemd's READY=1 counts unless the key holds
// one of LXD's false values, in any case.
func TestSystemdNotifyEnabled(t *testing.T) {
	for v, want := range map[string]bool{"": true, "true": true, "1": true, "on": true,
		"false": false, "0": false, "no": false, "OFF": false, "False": false} {
		if got := SystemdNotifyEnabled(map[string]string{KeySystemdNotify: v}); got != want {
			t.Errorf("readiness.systemd_notify=%q: enabled %v, want %v", v, got, want)
		}
	}
}
