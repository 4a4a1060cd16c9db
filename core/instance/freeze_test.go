package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// fakeFreezer stands in for the agent monitor: it records the freezes,
// thaws and (through the backend's onCreate) snapshots in one sequence.
type fakeFreezer struct {
	mu        sync.Mutex
	seq       []string
	freezeErr error
	thawErr   error
	expired   bool
	frozen    []string
}

var _ FSFreezer = (*fakeFreezer)(nil)

func (f *fakeFreezer) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq = append(f.seq, s)
}

func (f *fakeFreezer) FreezeFS(_ context.Context, uuid string, timeout time.Duration) ([]string, error) {
	f.record(fmt.Sprintf("freeze %s", timeout))
	if f.freezeErr != nil {
		return nil, f.freezeErr
	}
	return f.frozen, nil
}

func (f *fakeFreezer) ThawFS(ctx context.Context, uuid string) (bool, error) {
	if ctx.Err() != nil {
		f.record("thaw with a dead context")
	} else {
		f.record("thaw")
	}
	return f.expired, f.thawErr
}

func (f *fakeFreezer) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seq)
}

// TestSnapshotFreeze takes snapshots of a running instance through a
// freezer in each of the ways a freeze can go: frozen and thawed around the
// backend's snapshot (filesystem-consistent), a guest that cannot be frozen
// (no agent or one not connected: the freezer is not even asked; an agent
// lost since, switched off, a simulated guest, a failed freeze: a
// crash-consistent snapshot that says why, never a failed one), --no-freeze,
// a freeze that expired before the thaw, a failing thaw, a failing
// snapshot (thawed all the same, with its own context), a stateful and a
// stopped instance's snapshot (never frozen).
func TestSnapshotFreeze(t *testing.T) {
	tests := []struct {
		name            string
		agent           AgentState // the instance's agent as the manager knows it (default connected)
		opts            SnapshotOptions
		frozen          []string
		freezeErr       error
		thawErr         error
		expired         bool
		createErr       error
		cancelAtCreate  bool
		wantCalls       []string
		wantConsistency string
		wantDetail      string
	}{
		{name: "frozen", frozen: []string{"/boot", "/"}, wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"},
			wantConsistency: ConsistencyFilesystem, wantDetail: "frozen through the agent: /boot /"},
		{name: "agent not connected", agent: AgentStarted, wantCalls: []string{"snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "the guest's agent is not connected (agent started)"},
		{name: "no agent", agent: AgentNone, wantCalls: []string{"snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "the guest has no agent"},
		{name: "agent gone since", freezeErr: fmt.Errorf(`the agent of instance "web1" is not connected (agent state lost): %w`, errdefs.ErrConflict),
			wantCalls: []string{"freeze 2m0s", "snapshot"}, wantConsistency: ConsistencyCrash, wantDetail: "is not connected (agent state lost)"},
		{name: "switched off", freezeErr: fmt.Errorf("agent: switched off: %w", errdefs.ErrForbidden), wantCalls: []string{"freeze 2m0s", "snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "features.freeze"},
		{name: "simulated guest", freezeErr: fmt.Errorf("agent: a simulated guest: %w", errdefs.ErrNotSupported), wantCalls: []string{"freeze 2m0s", "snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "a simulated guest"},
		{name: "freeze failed", freezeErr: errors.New("freezing /: input/output error"), wantCalls: []string{"freeze 2m0s", "snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "the freeze failed: freezing /: input/output error"},
		{name: "no freeze", opts: SnapshotOptions{NoFreeze: true}, wantCalls: []string{"snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "--no-freeze"},
		{name: "stateful", opts: SnapshotOptions{Stateful: true}, wantCalls: []string{"snapshot"},
			wantConsistency: ConsistencyCrash, wantDetail: "stateful"},
		{name: "nothing freezable", frozen: []string{}, wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"},
			wantConsistency: ConsistencyCrash, wantDetail: "no filesystem that can be frozen"},
		{name: "expired before the thaw", frozen: []string{"/"}, expired: true, wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"},
			wantConsistency: ConsistencyCrash, wantDetail: "thawed at the freeze's timeout"},
		{name: "thaw failed", frozen: []string{"/"}, thawErr: errors.New("link down"), wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"},
			wantConsistency: ConsistencyCrash, wantDetail: "the thaw failed"},
		{name: "snapshot failed", frozen: []string{"/"}, createErr: errors.New("disk full"), wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"}},
		// The request's context ends while the backend works: the thaw
		// still runs, on a context of its own (the fake records a dead one).
		{name: "request gone during the snapshot", frozen: []string{"/"}, cancelAtCreate: true, wantCalls: []string{"freeze 2m0s", "snapshot", "thaw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, src := newSnapEnv(t)
			fr := &fakeFreezer{freezeErr: tt.freezeErr, thawErr: tt.thawErr, expired: tt.expired, frozen: tt.frozen}
			m, err := NewManager(Config{Store: e.store, Backends: src, Bus: e.bus, Hooks: e.hooks, Files: e.files, DefaultBackend: "fake", Freezer: fr})
			if err != nil {
				t.Fatal(err)
			}
			e.m = m
			e.create("web1", nil)
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			agent := tt.agent
			if tt.name != "no agent" && agent == AgentNone {
				agent = AgentConnected
			}
			if agent != AgentNone {
				if err := e.m.SetAgentState(bg, e.get("web1").UUID, agent, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			src["fake"].onCreate = func() error {
				fr.record("snapshot")
				if tt.cancelAtCreate {
					cancel()
				}
				return tt.createErr
			}
			sn, err := e.m.CreateSnapshot(ctx, "web1", "s0", tt.opts, adminCaller)
			if got := fr.calls(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls = %q, want %q", got, tt.wantCalls)
			}
			if tt.createErr != nil || tt.cancelAtCreate {
				if err == nil || (tt.createErr != nil && !errors.Is(err, tt.createErr)) {
					t.Fatalf("CreateSnapshot = %v, want the backend's error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateSnapshot: %v", err)
			}
			if sn.Consistency != tt.wantConsistency || !strings.Contains(sn.ConsistencyDetail, tt.wantDetail) {
				t.Errorf("consistency = %q (%s), want %q with %q", sn.Consistency, sn.ConsistencyDetail, tt.wantConsistency, tt.wantDetail)
			}
			// Stored: the list says the same.
			list, err := e.m.Snapshots(bg, "web1")
			if err != nil || len(list) != 1 || list[0].Consistency != sn.Consistency || list[0].ConsistencyDetail != sn.ConsistencyDetail {
				t.Errorf("stored snapshot = %+v, %v; want consistency %q", list, err, sn.Consistency)
			}
		})
	}
	t.Run("stopped instance", func(t *testing.T) {
		e, src := newSnapEnv(t)
		fr := &fakeFreezer{frozen: []string{"/"}}
		m, err := NewManager(Config{Store: e.store, Backends: src, Bus: e.bus, Hooks: e.hooks, Files: e.files, DefaultBackend: "fake", Freezer: fr})
		if err != nil {
			t.Fatal(err)
		}
		e.m = m
		e.create("web1", nil)
		sn, err := e.m.CreateSnapshot(bg, "web1", "s0", SnapshotOptions{}, adminCaller)
		if err != nil || sn.Consistency != ConsistencyStopped || len(fr.calls()) != 0 {
			t.Fatalf("snapshot of a stopped instance = %+v, %v, freezer calls %q; want stopped, no freeze", sn, err, fr.calls())
		}
	})
}
