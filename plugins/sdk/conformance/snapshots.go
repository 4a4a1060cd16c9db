package conformance

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// wantKind checks that err is of kind want and says something.
func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: %v, want success", what, err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("%s: err = %v, want %v", what, err, want)
	case want != nil && len(err.Error()) <= len(want.Error())+2:
		t.Errorf("%s: error %q says nothing beyond its kind", what, err)
	}
}

// testSnapshots checks the snapshot contract on a stopped guest: a
// backend without snapshot.v1 answers ErrNotSupported, one with it takes,
// refuses duplicates and bad names precisely, renames, restores and
// deletes stateless snapshots; one without snapshot.stateful.v1 refuses a
// stateful snapshot with ErrNotSupported. (The stateful path boots a
// guest: the backend's own tests cover it.)
func (s *suite) testSnapshots(t *testing.T) {
	sn, ok := s.b.(sdk.Snapshotter)
	if !ok {
		t.Fatal("the SDK's gRPC client does not implement sdk.Snapshotter")
	}
	g := s.create(t, s.b, nil)
	ctx, cancel := s.ctx()
	defer cancel()
	if !s.info.Has(sdk.CapSnapshot) {
		_, err := sn.SnapshotCreate(ctx, g.h, "snap0", false)
		wantKind(t, "SnapshotCreate without "+string(sdk.CapSnapshot), err, sdk.ErrNotSupported)
		return
	}
	_, err := sn.SnapshotCreate(ctx, g.h, "snap0", false)
	wantKind(t, "SnapshotCreate(snap0)", err, nil)
	steps := []struct {
		what string
		err  error
		run  func() error
	}{
		{"SnapshotCreate(snap0) again", sdk.ErrConflict, func() error { _, err := sn.SnapshotCreate(ctx, g.h, "snap0", false); return err }},
		{"SnapshotCreate(../x)", sdk.ErrInvalid, func() error { _, err := sn.SnapshotCreate(ctx, g.h, "../x", false); return err }},
		{"SnapshotCreate(bad handle)", sdk.ErrInvalid, func() error {
			_, err := sn.SnapshotCreate(ctx, sdk.Handle("not a handle"), "snap0", false)
			return err
		}},
		{"SnapshotRename(missing)", sdk.ErrNotFound, func() error { return sn.SnapshotRename(ctx, g.h, "missing", "x") }},
		{"SnapshotRename(snap0, snap1)", nil, func() error { return sn.SnapshotRename(ctx, g.h, "snap0", "snap1") }},
		{"SnapshotCreate(snap2)", nil, func() error { _, err := sn.SnapshotCreate(ctx, g.h, "snap2", false); return err }},
		{"SnapshotRename(snap1, snap2)", sdk.ErrConflict, func() error { return sn.SnapshotRename(ctx, g.h, "snap1", "snap2") }},
		{"SnapshotRestore(missing)", sdk.ErrNotFound, func() error { return sn.SnapshotRestore(ctx, g.h, "missing", sdk.RestoreOptions{}) }},
		{"SnapshotRestore(snap1) check only", nil, func() error {
			return sn.SnapshotRestore(ctx, g.h, "snap1", sdk.RestoreOptions{CheckOnly: true})
		}},
		{"SnapshotRestore(snap1)", nil, func() error { return sn.SnapshotRestore(ctx, g.h, "snap1", sdk.RestoreOptions{}) }},
		{"SnapshotDelete(snap1)", nil, func() error { return sn.SnapshotDelete(ctx, g.h, "snap1") }},
		{"SnapshotDelete(snap1) again", nil, func() error { return sn.SnapshotDelete(ctx, g.h, "snap1") }},
		{"SnapshotRestore(deleted snap1)", sdk.ErrNotFound, func() error { return sn.SnapshotRestore(ctx, g.h, "snap1", sdk.RestoreOptions{}) }},
	}
	if !s.info.Has(sdk.CapSnapshotStateful) {
		steps = append(steps, struct {
			what string
			err  error
			run  func() error
		}{"SnapshotCreate(stateful) without " + string(sdk.CapSnapshotStateful), sdk.ErrNotSupported, func() error {
			_, err := sn.SnapshotCreate(ctx, g.h, "snap3", true)
			return err
		}})
	} else {
		// A stopped guest has no memory state to take.
		steps = append(steps, struct {
			what string
			err  error
			run  func() error
		}{"SnapshotCreate(stateful) of a stopped guest", sdk.ErrConflict, func() error {
			_, err := sn.SnapshotCreate(ctx, g.h, "snap3", true)
			return err
		}}, struct {
			what string
			err  error
			run  func() error
		}{"SnapshotRestore(stateful) of a stateless snapshot", sdk.ErrConflict, func() error {
			return sn.SnapshotRestore(ctx, g.h, "snap2", sdk.RestoreOptions{Stateful: true, CheckOnly: true})
		}})
	}
	for _, st := range steps {
		wantKind(t, st.what, st.run(), st.err)
	}
}

// testMove checks the move contract's refusals: a backend without move.v1
// answers Adopt with ErrNotSupported; one with it refuses a handle it
// cannot take with ErrInvalid, naming the other backend.
func (s *suite) testMove(t *testing.T) {
	a, ok := s.b.(sdk.Adopter)
	if !ok {
		t.Fatal("the SDK's gRPC client does not implement sdk.Adopter")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	const from = "conformance-other-backend"
	spec := s.cfg.Spec("conformance-move", newUUID())
	_, err := a.Adopt(ctx, sdk.Handle(`{"not":"a handle of this backend"}`), from, spec)
	if !s.info.Has(sdk.CapMove) {
		wantKind(t, "Adopt without "+string(sdk.CapMove), err, sdk.ErrNotSupported)
		return
	}
	wantKind(t, "Adopt(foreign handle)", err, sdk.ErrInvalid)
	if err != nil && !strings.Contains(err.Error(), from) {
		t.Errorf("Adopt(foreign handle): %q does not name the other backend %q", err, from)
	}
}
