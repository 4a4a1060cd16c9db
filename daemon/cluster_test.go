package daemon

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// TestClusterStoreInstances checks the cluster's view of the instances the
// database records at each member, over a real store. Tried: a member's
// instances of one backend (the other backend's and another member's left
// out), any backend, one instance by name (its location kept) and a name
// the database does not have (not found).
func TestClusterStoreInstances(t *testing.T) {
	ctx := context.Background()
	st := dbtest.SQLite(t)
	for _, in := range []*db.Instance{
		{Name: "b1", UUID: "00000000-0000-4000-8000-000000000001", Backend: "sim", PowerState: "running", Location: "b"},
		{Name: "b2", UUID: "00000000-0000-4000-8000-000000000002", Backend: "qemu", PowerState: "stopped", Location: "b"},
		{Name: "a1", UUID: "00000000-0000-4000-8000-000000000003", Backend: "sim", PowerState: "running", Location: "a"},
	} {
		if err := st.CreateInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	cs := clusterStore{Store: st.(membership.Store), db: st}

	for _, tc := range []struct {
		member, backend string
		want            []string
	}{
		{"b", "sim", []string{"b1"}},
		{"b", "", []string{"b1", "b2"}},
		{"c", "", nil},
	} {
		list, err := cs.StoredInstances(ctx, tc.member, tc.backend)
		if err != nil {
			t.Fatalf("StoredInstances(%q, %q): %v", tc.member, tc.backend, err)
		}
		var names []string
		for _, inst := range list {
			if inst.Location != tc.member {
				t.Errorf("StoredInstances(%q): %s located at %q", tc.member, inst.Name, inst.Location)
			}
			names = append(names, inst.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("StoredInstances(%q, %q) = %q, want %q", tc.member, tc.backend, names, tc.want)
		}
	}
	inst, err := cs.StoredInstance(ctx, "b2")
	if err != nil || inst.Name != "b2" || inst.Location != "b" || inst.Backend != "qemu" {
		t.Errorf("StoredInstance(b2) = %+v, %v", inst, err)
	}
	if _, err := cs.StoredInstance(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("StoredInstance of a missing instance: %v, want not found", err)
	}
}
