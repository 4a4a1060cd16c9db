package instance

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// lastWordsHooks is an agent monitor's part in a guest's end: at
// GuestExiting it records the agent's last word (STOPPED) through the
// manager, as the monitor does when it reads the ring once more.
type lastWordsHooks struct {
	recHooks
	m       *Manager
	t       *testing.T
	exiting []string // the instance's status when GuestExiting was called
}

var _ ExitHooks = (*lastWordsHooks)(nil)

func (h *lastWordsHooks) GuestExiting(ctx context.Context, inst *Instance) {
	if _, ok := ctx.Deadline(); !ok {
		h.t.Error("GuestExiting's context has no deadline")
	}
	got, err := h.m.Get(ctx, inst.Name)
	if err != nil {
		h.t.Errorf("GuestExiting: %v", err)
		return
	}
	h.exiting = append(h.exiting, got.Status)
	if err := h.m.SetAgentState(ctx, inst.UUID, AgentStopped, time.Now()); err != nil {
		h.t.Errorf("recording the last word at GuestExiting: %v", err)
	}
}

// TestGuestExitingBeforeRecorded: when a guest's process ends, by a stop
// or by powering itself off, the hooks get GuestExiting while the instance
// still runs (Stopping during a stop), and the agent's last word they record then (its STOPPED, read
// from the ring a backend keeps after the guest is gone) is in the timeline
// before the guest's stop. Before, the end was recorded first and the word,
// read later, was refused: the timeline went connected -> (none).
func TestGuestExitingBeforeRecorded(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status string // while the hook runs
		end    func(e *env, inst *Instance)
	}{
		{"stop", "Stopping", func(e *env, inst *Instance) {
			if err := e.m.Stop(bg, inst.Name, StopOptions{}, adminCaller); err != nil {
				t.Fatal(err)
			}
		}},
		{"power-off", "Running", func(e *env, inst *Instance) {
			e.be.kill(inst.UUID)
			e.m.HandleBackendEvent("fake", contract.Event{UUID: inst.UUID, Kind: contract.EventExited, Exit: contract.ExitPoweroff, Time: time.Now()})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			hooks := &lastWordsHooks{t: t}
			e.hooks = &hooks.recHooks
			m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus,
				Hooks: hooks, Files: e.files, DefaultBackend: "fake"})
			if err != nil {
				t.Fatal(err)
			}
			hooks.m, e.m = m, m
			inst, err := m.Create(bg, CreateRequest{Name: "web1", Start: true}, adminCaller)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetAgentState(bg, inst.UUID, AgentConnected, time.Now()); err != nil {
				t.Fatal(err)
			}
			tt.end(e, inst)
			if !slices.Equal(hooks.exiting, []string{tt.status}) {
				t.Errorf("GuestExiting saw the instance as %v, want once, still %s", hooks.exiting, tt.status)
			}
			tl := e.timeline("web1")
			agentStop, guestStop := slices.Index(tl, "agent connected->stopped agent"), -1
			for i, x := range tl {
				if x == "state running->stopped backend" || x == "state running->stopped api: unix root" {
					guestStop = i
				}
			}
			if agentStop < 0 || guestStop < 0 || agentStop > guestStop {
				t.Errorf("timeline %q: want the agent's STOPPED before the guest's stop", tl)
			}
			if got := e.get("web1"); got.Status != "Stopped" {
				t.Errorf("status %s after the end", got.Status)
			}
		})
	}
}
