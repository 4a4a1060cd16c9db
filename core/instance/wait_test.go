package instance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestWait(t *testing.T) {
	devlxd := events.Requestor{Protocol: "devlxd"}
	tests := []struct {
		name    string
		start   bool   // start the instance before waiting
		what    string // what to wait for
		timeout time.Duration
		act     func(e *env, uuid string) error // done while waiting (nil: nothing)
		want    string
	}{
		{"ready already", true, WaitReady, time.Minute, nil, ""}, // filled below
		{"ready declared", true, WaitReady, time.Minute, func(e *env, uuid string) error { return e.m.SetReady(bg, uuid, true, devlxd) }, OutcomeMet},
		{"agent connected", true, WaitAgentConnected, time.Minute, func(e *env, uuid string) error {
			return e.m.SetAgentState(bg, uuid, AgentConnected, time.Time{})
		}, OutcomeMet},
		{"running while stopped", false, WaitRunning, time.Minute, nil, OutcomeStopped},
		{"running now", true, WaitRunning, time.Minute, nil, OutcomeMet},
		{"stopped while waiting", true, WaitReady, time.Minute, func(e *env, uuid string) error { return e.m.Stop(bg, "web1", StopOptions{}, adminCaller) }, OutcomeStopped},
		{"stopped", true, WaitStopped, time.Minute, func(e *env, uuid string) error { return e.m.Stop(bg, "web1", StopOptions{}, adminCaller) }, OutcomeMet},
		{"failed while waiting", true, WaitReady, time.Minute, func(e *env, uuid string) error {
			e.m.HandleBackendEvent("fake", contract.Event{Kind: contract.EventExited, UUID: uuid, Detail: "guest crashed", Exit: contract.ExitCrash})
			return nil
		}, OutcomeFailed},
		{"deleted while waiting", true, WaitReady, time.Minute, func(e *env, uuid string) error { return e.m.Delete(bg, "web1", true, adminCaller) }, OutcomeDeleted},
		{"timeout", true, WaitReady, 50 * time.Millisecond, nil, OutcomeTimeout},
		{"degraded is not ready", true, WaitReady, 50 * time.Millisecond, func(e *env, uuid string) error {
			return e.m.Declare(bg, uuid, Declaration{State: DeclaredDegraded}, devlxd)
		}, OutcomeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			inst := e.create("web1", nil)
			if tt.start {
				if err := e.m.Start(bg, "web1", adminCaller); err != nil {
					t.Fatal(err)
				}
			}
			want := tt.want
			if tt.name == "ready already" {
				if err := e.m.SetReady(bg, inst.UUID, true, devlxd); err != nil {
					t.Fatal(err)
				}
				want = OutcomeMet
			}
			res := make(chan *WaitResult, 1)
			go func() {
				r, err := e.m.Wait(bg, "web1", tt.what, tt.timeout)
				if err != nil {
					t.Error(err)
				}
				res <- r
			}()
			if tt.act != nil {
				waitRegistered(t, e.m, "web1", tt.what)
				if err := tt.act(e, inst.UUID); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-res:
				if r == nil {
					return
				}
				if r.Outcome != want {
					t.Fatalf("outcome %s, want %s", r.Outcome, want)
				}
				if (r.Instance == nil) != (want == OutcomeDeleted) {
					t.Fatalf("instance %v with outcome %s", r.Instance, r.Outcome)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the wait did not end")
			}
			e.m.mu.RLock()
			defer e.m.mu.RUnlock()
			for _, en := range e.m.byName {
				if len(en.waiters) != 0 {
					t.Errorf("%d waiters left on %s", len(en.waiters), en.name)
				}
			}
		})
	}
}

// waitRegistered waits until a waiter for what is registered on name, or
// the wait was decided at once (then the act changes nothing).
func waitRegistered(t *testing.T, m *Manager, name, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.RLock()
		e := m.byName[name]
		n := 0
		if e != nil {
			n = len(e.waiters)
		}
		m.mu.RUnlock()
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond) // the waiter's goroutine has no other signal to give
	}
	t.Fatalf("no waiter for %s registered on %s", what, name)
}

func TestWaitErrors(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	tests := []struct {
		name, inst, what string
		timeout          time.Duration
		err              error
	}{
		{"unknown condition", "web1", "happy", time.Second, errdefs.ErrInvalid},
		{"no timeout", "web1", WaitReady, 0, errdefs.ErrInvalid},
		{"unknown instance", "nope", WaitReady, time.Second, errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.m.Wait(bg, tt.inst, tt.what, tt.timeout); !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
		})
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Wait(ctx, "web1", WaitReady, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// TestWaitMany checks that many waiters on one instance are all answered
// by one change, and none is left registered.
func TestWaitMany(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var wg sync.WaitGroup
	outcomes := make(chan string, n)
	for range n {
		wg.Go(func() {
			r, err := e.m.Wait(bg, "web1", WaitReady, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			outcomes <- r.Outcome
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.m.mu.RLock()
		got := len(e.m.byName["web1"].waiters)
		e.m.mu.RUnlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d waiters registered", got, n)
		}
		time.Sleep(time.Millisecond)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(outcomes)
	for o := range outcomes {
		if o != OutcomeMet {
			t.Fatalf("outcome %s", o)
		}
	}
}
