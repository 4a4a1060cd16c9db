package instance

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/errdefs"
)

// What a Wait waits for.
const (
	WaitReady          = "ready"
	WaitAgentConnected = "agent-connected"
	WaitRunning        = "running"
	WaitStopped        = "stopped"
)

// WaitFors lists the conditions Wait accepts.
var WaitFors = []string{WaitReady, WaitAgentConnected, WaitRunning, WaitStopped}

// Outcomes of a Wait.
const (
	// OutcomeMet: the condition holds.
	OutcomeMet = "met"
	// OutcomeTimeout: the timeout passed first.
	OutcomeTimeout = "timeout"
	// OutcomeStopped: the instance is (or went) stopped, so the condition
	// cannot come true.
	OutcomeStopped = "stopped"
	// OutcomeFailed: the instance is (or went) in Error.
	OutcomeFailed = "failed"
	// OutcomeDeleted: the instance was deleted while waiting.
	OutcomeDeleted = "deleted"
)

// WaitResult is the answer of Wait: the outcome and the instance as it
// was when the wait ended (nil when deleted).
type WaitResult struct {
	Outcome  string
	Instance *Instance
}

// waiter is one Wait in progress, registered on its entry until decided.
type waiter struct {
	what string
	done chan string // buffered (1): the outcome
}

// Wait waits until the condition what (WaitFors) holds for the instance
// called name, the instance can no longer meet it (stopped, failed,
// deleted), timeout passes or ctx ends (ctx's error). It polls nothing and
// starts no goroutine: the waiter is registered on the instance and every
// change of the instance decides it (mutate calls wakeLocked). An unknown
// what is errdefs.ErrInvalid, an unknown instance errdefs.ErrNotFound.
func (m *Manager) Wait(ctx context.Context, name, what string, timeout time.Duration) (*WaitResult, error) {
	if !slices.Contains(WaitFors, what) {
		return nil, fmt.Errorf("invalid condition %q: must be one of ready, agent-connected, running, stopped: %w", what, errdefs.ErrInvalid)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("invalid timeout %s: must be positive: %w", timeout, errdefs.ErrInvalid)
	}
	e, err := m.lookup(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("waiting: %w", err)
	}
	w := &waiter{what: what, done: make(chan string, 1)}
	m.mu.Lock()
	if e.rt.deleted {
		m.mu.Unlock()
		return &WaitResult{Outcome: OutcomeDeleted}, nil
	}
	if out := waitOutcome(e, what); out != "" {
		view := viewOf(e)
		m.mu.Unlock()
		return &WaitResult{Outcome: out, Instance: view}, nil
	}
	e.waiters = append(e.waiters, w)
	m.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	var out string
	select {
	case out = <-w.done:
	case <-t.C:
		out = OutcomeTimeout
	case <-ctx.Done():
		out = ""
	}
	m.mu.Lock()
	if out != OutcomeDeleted {
		if i := slices.Index(e.waiters, w); i >= 0 {
			e.waiters = slices.Delete(e.waiters, i, i+1)
		} else if out != OutcomeMet && len(w.done) > 0 {
			out = <-w.done // decided meanwhile: the decision wins
		}
	}
	var view *Instance
	if out != OutcomeDeleted {
		view = viewOf(e)
	}
	m.mu.Unlock()
	if out == "" {
		return nil, fmt.Errorf("waiting for instance %q to be %s: %w", name, what, ctx.Err())
	}
	return &WaitResult{Outcome: out, Instance: view}, nil
}

// waitOutcome decides a wait for what on e's current state: "" while
// undecided. Manager.mu must be held.
func waitOutcome(e *entry, what string) string {
	rec, rt := e.rec, &e.rt
	power := rec.PowerState
	code := statusOfState(rec, rt)
	switch what {
	case WaitStopped:
		if power != status.PowerRunning && rt.op == status.OpNone {
			return OutcomeMet
		}
		return ""
	case WaitRunning:
		if code == status.Running || code == status.Ready {
			return OutcomeMet
		}
	case WaitReady:
		if code == status.Ready {
			return OutcomeMet
		}
	case WaitAgentConnected:
		if power == status.PowerRunning && rt.agent.State == AgentConnected {
			return OutcomeMet
		}
	}
	if power != status.PowerRunning && rt.op == status.OpNone {
		if power == status.PowerError {
			return OutcomeFailed
		}
		return OutcomeStopped
	}
	return ""
}

// wakeLocked decides the waiters of e after a change; Manager.mu must be
// held for writing. A deleted entry answers every waiter OutcomeDeleted.
func (m *Manager) wakeLocked(e *entry) {
	if len(e.waiters) == 0 {
		return
	}
	kept := e.waiters[:0]
	for _, w := range e.waiters {
		out := OutcomeDeleted
		if !e.rt.deleted {
			out = waitOutcome(e, w.what)
		}
		if out == "" {
			kept = append(kept, w)
			continue
		}
		w.done <- out
	}
	clear(e.waiters[len(kept):])
	e.waiters = kept
}

// Waiters returns how many Waits are registered now (for metrics and
// benchmarks).
func (m *Manager) Waiters() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, e := range m.byName {
		n += len(e.waiters)
	}
	return n
}
