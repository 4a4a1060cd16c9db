package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// snapFake is a fakeBackend with snapshots (contract.Snapshotter) and moves
// (contract.Adopter), announced as capabilities, and a switch that makes it
// refuse saved states as a QEMU backend refuses one of the other layout.
type snapFake struct {
	*fakeBackend
	caps     []contract.Capability
	prefixes []string

	mu          sync.Mutex
	refuseState bool                      // SnapshotRestore{Stateful} and Start{RestoreState} answer ErrConflict
	restores    []contract.RestoreOptions // SnapshotRestore calls
	snaps       map[string]bool
	adopted     []string     // "from handle"
	onCreate    func() error // if set, SnapshotCreate calls it first and fails with its error
}

func newSnapFake(name string, prefixes []string, caps ...contract.Capability) *snapFake {
	f := newFakeBackend(name)
	f.stateful = true
	return &snapFake{fakeBackend: f, caps: caps, prefixes: prefixes, snaps: map[string]bool{}}
}

func (s *snapFake) Info(ctx context.Context) (*contract.Info, error) {
	info, _ := s.fakeBackend.Info(ctx)
	info.Capabilities = append(info.Capabilities, s.caps...)
	info.ConfigPrefixes = s.prefixes
	return info, nil
}

const refusal = "the state was saved with the legacy layout (ring buffer on org.linuxcontainers.lxd)"

func (s *snapFake) Start(ctx context.Context, h contract.Handle, spec *contract.GuestSpec) (contract.Handle, *contract.GuestState, error) {
	s.mu.Lock()
	refuse := s.refuseState
	s.mu.Unlock()
	if refuse && spec.RestoreState {
		return nil, nil, fmt.Errorf("starting guest from its saved state: %s: %w", refusal, errdefs.ErrConflict)
	}
	return s.fakeBackend.Start(ctx, h, spec)
}

func (s *snapFake) SnapshotCreate(_ context.Context, h contract.Handle, name string, stateful bool) (*contract.SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onCreate != nil {
		if err := s.onCreate(); err != nil {
			return nil, err
		}
	}
	s.snaps[string(h)+name] = true
	return &contract.SnapshotInfo{StateBytes: map[bool]int64{true: 100}[stateful], Details: map[string]string{"layout": "legacy"}}, nil
}

func (s *snapFake) SnapshotRestore(_ context.Context, h contract.Handle, name string, opts contract.RestoreOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.snaps[string(h)+name] {
		return fmt.Errorf("no snapshot %q: %w", name, errdefs.ErrNotFound)
	}
	if opts.Stateful && s.refuseState {
		return fmt.Errorf("restoring %q: %s: %w", name, refusal, errdefs.ErrConflict)
	}
	s.restores = append(s.restores, opts)
	if !opts.CheckOnly {
		s.fakeBackend.mu.Lock()
		s.fakeBackend.guests[string(h)].stateful = opts.Stateful // the saved state the next start resumes
		s.fakeBackend.mu.Unlock()
	}
	return nil
}

func (s *snapFake) SnapshotDelete(_ context.Context, h contract.Handle, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.snaps, string(h)+name)
	return nil
}

func (s *snapFake) SnapshotRename(_ context.Context, h contract.Handle, oldName, newName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.snaps, string(h)+oldName)
	s.snaps[string(h)+newName] = true
	return nil
}

// Adopt takes the other fake's guest record as its own.
func (s *snapFake) Adopt(_ context.Context, h contract.Handle, from string, spec *contract.GuestSpec) (contract.Handle, error) {
	s.mu.Lock()
	s.adopted = append(s.adopted, from+" "+string(h))
	s.mu.Unlock()
	s.fakeBackend.mu.Lock()
	defer s.fakeBackend.mu.Unlock()
	nh := `{"adopted":` + string(h) + `}`
	s.fakeBackend.guests[nh] = &fakeGuest{uuid: spec.UUID, spec: spec}
	return contract.Handle(nh), nil
}

// snapSource is a BackendSource of snapFakes.
type snapSource map[string]*snapFake

func (s snapSource) Backend(name string) (contract.Backend, error) {
	b, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("backend %q: %w", name, errdefs.ErrNotFound)
	}
	return b, nil
}

// newSnapEnv is newEnv with snapshot-capable backends: "fake" (stateful
// snapshots and moves), "plain" (neither), "other" (moves, same prefix)
// and "alien" (moves, another prefix).
func newSnapEnv(t *testing.T) (*env, snapSource) {
	e := newEnv(t)
	src := snapSource{
		"fake":  newSnapFake("fake", []string{"fake."}, contract.CapSnapshot, contract.CapSnapshotStateful, contract.CapMove),
		"plain": newSnapFake("plain", []string{"fake."}),
		"other": newSnapFake("other", []string{"fake."}, contract.CapSnapshot, contract.CapMove),
		"alien": newSnapFake("alien", []string{"alien."}, contract.CapMove),
	}
	m, err := NewManager(Config{Store: e.store, Backends: src, Bus: e.bus, Hooks: e.hooks, Files: e.files, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	e.m, e.be = m, src["fake"].fakeBackend
	return e, src
}

func lastSpec(f *fakeBackend) *contract.GuestSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last *contract.GuestSpec
	for _, g := range f.guests {
		if g.spec != nil && g.running {
			last = g.spec
		}
	}
	return last
}

// TestRestoreReadySemantics: a stateful restore brings back the Ready flag
// and config of the snapshot and asks for the state; a stateless restore
// of a running guest's snapshot boots afresh, not Ready; one of a stopped
// guest's snapshot leaves the instance Stopped; a refused state changes
// nothing and names the command that works.
func TestRestoreReadySemantics(t *testing.T) {
	e, src := newSnapEnv(t)
	inst := e.create("web1", map[string]string{"user.x": "1"})
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name     string
		stateful bool
	}{{"with-state", true}, {"plain", false}} {
		sn, err := e.m.CreateSnapshot(bg, "web1", s.name, SnapshotOptions{Stateful: s.stateful}, adminCaller)
		if err != nil || !sn.Ready || !sn.Running || sn.Stateful != s.stateful || sn.Config[KeyReady] != "" || sn.Config["user.x"] != "1" {
			t.Fatalf("CreateSnapshot(%s) = %+v, %v", s.name, sn, err)
		}
	}
	if _, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.x": "2"}, nil, adminCaller); err != nil {
		t.Fatal(err)
	}

	// Stateful: Ready as saved, config back, the state resumed.
	boot := e.get("web1").Boot
	if err := e.m.Restore(bg, "web1", "with-state", RestoreOptions{Stateful: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	got := e.get("web1")
	if !got.Ready() || got.Config["user.x"] != "1" || got.Boot != boot+1 || !lastSpec(e.be).RestoreState {
		t.Errorf("after restore --stateful: %s, ready %v, user.x %q, boot %d, restore asked %v", got.Status, got.Ready(), got.Config["user.x"], got.Boot, lastSpec(e.be).RestoreState)
	}
	// Stateless: a fresh boot, not Ready.
	if err := e.m.Restore(bg, "web1", "plain", RestoreOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	got = e.get("web1")
	if got.Ready() || got.Status != "Running" || lastSpec(e.be).RestoreState {
		t.Errorf("after a stateless restore: %s, ready %v, restore asked %v; want Running, not Ready, booted afresh", got.Status, got.Ready(), lastSpec(e.be).RestoreState)
	}
	// A snapshot of a stopped guest restores to Stopped.
	if err := e.m.Stop(bg, "web1", StopOptions{Force: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.CreateSnapshot(bg, "web1", "stopped", SnapshotOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Restore(bg, "web1", "stopped", RestoreOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Status != "Stopped" {
		t.Errorf("after restoring a stopped guest's snapshot: %s, want Stopped", got.Status)
	}
	// Refusals change nothing.
	src["fake"].mu.Lock()
	src["fake"].refuseState = true
	src["fake"].mu.Unlock()
	for _, tc := range []struct {
		snap  string
		opts  RestoreOptions
		kind  error
		parts []string
	}{
		{"with-state", RestoreOptions{Stateful: true}, errdefs.ErrConflict, []string{refusal, "`guestlink restore web1 with-state` (without --stateful)"}},
		{"plain", RestoreOptions{Stateful: true}, errdefs.ErrConflict, []string{"no memory state", "`guestlink restore web1 plain` (without --stateful)"}},
		{"nosuch", RestoreOptions{}, errdefs.ErrNotFound, []string{`snapshot "nosuch"`}},
	} {
		err := e.m.Restore(bg, "web1", tc.snap, tc.opts, adminCaller)
		if !errors.Is(err, tc.kind) {
			t.Errorf("Restore(%s, %+v) = %v, want %v", tc.snap, tc.opts, err, tc.kind)
			continue
		}
		for _, p := range tc.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("Restore(%s): %q does not contain %q", tc.snap, err, p)
			}
		}
	}
	if got := e.get("web1"); got.Status != "Stopped" {
		t.Errorf("after refused restores: %s, want Stopped", got.Status)
	}
}

// TestStartRefusedStateStaysStopped: a start whose saved state the backend
// refuses keeps the instance Stopped (not Error) and names start --stateless.
func TestStartRefusedStateStaysStopped(t *testing.T) {
	e, src := newSnapEnv(t)
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
	src["fake"].mu.Lock()
	src["fake"].refuseState = true
	src["fake"].mu.Unlock()
	err := e.m.Start(bg, "web1", adminCaller)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "`guestlink start --stateless web1`") || !strings.Contains(err.Error(), refusal) {
		t.Errorf("Start = %v; want a conflict naming the refusal and guestlink start --stateless web1", err)
	}
	if got := e.get("web1"); got.Status != "Stopped" {
		t.Errorf("after the refused start: %s, want Stopped", got.Status)
	}
	if err := e.m.StartWith(bg, "web1", StartOptions{Stateless: true}, adminCaller); err != nil {
		t.Errorf("start --stateless after the refusal: %v", err)
	}
}

// TestSnapshotsAndMoveRefusals: precise refusals for backends without the
// capabilities, running instances, foreign config keys; a move adopts the
// guest and keeps the snapshots.
func TestSnapshotsAndMoveRefusals(t *testing.T) {
	e, src := newSnapEnv(t)
	for _, n := range []string{"p1", "o1", "web1"} {
		backend := map[string]string{"p1": "plain", "o1": "other", "web1": "fake"}[n]
		if _, err := e.m.Create(bg, CreateRequest{Name: n, Backend: backend, Config: map[string]string{"fake.cmd": "x"}}, adminCaller); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.CreateSnapshot(bg, "web1", "s0", SnapshotOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		run   func() error
		kind  error
		parts []string
	}{
		{"snapshot on plain", func() error { _, err := e.m.CreateSnapshot(bg, "p1", "s", SnapshotOptions{}, adminCaller); return err }, errdefs.ErrNotSupported, []string{"backend plain cannot take snapshots", "snapshot.v1"}},
		{"duplicate", func() error {
			_, err := e.m.CreateSnapshot(bg, "web1", "s0", SnapshotOptions{}, adminCaller)
			return err
		}, errdefs.ErrAlreadyExists, []string{`"s0"`}},
		{"stateful without snapshot.stateful.v1", func() error {
			_, err := e.m.CreateSnapshot(bg, "o1", "s", SnapshotOptions{Stateful: true}, adminCaller)
			return err
		}, errdefs.ErrNotSupported, []string{"backend other cannot take stateful snapshots", "snapshot.stateful.v1"}},
		{"move running", func() error { return e.m.Move(bg, "web1", "other", adminCaller) }, errdefs.ErrConflict, []string{"only a stopped instance moves", "guestlink stop web1"}},
		{"move onto its own backend", func() error { return e.m.Move(bg, "p1", "plain", adminCaller) }, errdefs.ErrInvalid, []string{"already on backend plain"}},
		{"rename onto itself", func() error { return e.m.RenameSnapshot(bg, "web1", "s0", "s0", adminCaller) }, errdefs.ErrAlreadyExists, nil},
	} {
		err := tc.run()
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.kind)
			continue
		}
		for _, p := range tc.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %q does not contain %q", tc.what, err, p)
			}
		}
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Force: true}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.CreateSnapshot(bg, "web1", "s", SnapshotOptions{Stateful: true}, adminCaller); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "needs a running instance") {
		t.Errorf("stateful snapshot of a stopped instance: %v", err)
	}
	if err := e.m.Move(bg, "web1", "plain", adminCaller); !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "move.v1") {
		t.Errorf("move to a backend without move.v1: %v", err)
	}
	if err := e.m.Move(bg, "web1", "alien", adminCaller); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "config key fake.cmd belongs to backend fake") {
		t.Errorf("move with a foreign config key: %v", err)
	}
	if err := e.m.Move(bg, "web1", "other", adminCaller); err != nil {
		t.Fatal(err)
	}
	got := e.get("web1")
	if got.Backend != "other" || len(src["other"].adopted) != 1 || !strings.HasPrefix(src["other"].adopted[0], "fake ") {
		t.Errorf("after the move: backend %s, adopted %v", got.Backend, src["other"].adopted)
	}
	list, err := e.m.Snapshots(bg, "web1")
	if err != nil || len(list) != 1 || list[0].Backend != "fake" {
		t.Errorf("snapshots after the move: %+v, %v", list, err)
	}
	if tl := e.timeline("web1"); !slices.ContainsFunc(tl, func(s string) bool { return strings.HasPrefix(s, "state stopped->stopped") }) {
		t.Errorf("timeline %v has no move", tl)
	}
}
