package db_test

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestSnapshots runs the snapshot store through its operations on both
// engines: create, duplicate, list order, rename (onto an existing name,
// of an unknown one), delete, and the cascade when the instance goes.
func TestSnapshots(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			s := dbtest.Open(t, e.URL(t))
			ss, ok := s.(record.SnapshotStore)
			if !ok {
				t.Fatal("the store does not implement SnapshotStore")
			}
			in := mustCreate(ctx, t, s, newInstance("snap1"))
			other := mustCreate(ctx, t, s, newInstance("snap2"))
			for _, name := range []string{"a", "b"} {
				sn := &record.Snapshot{InstanceID: in.ID, Name: name, Backend: "sim", Stateful: name == "b", Ready: true,
					Config: map[string]string{"user.x": name}, Details: map[string]string{"layout": "legacy"}}
				if name == "b" {
					sn.Consistency, sn.ConsistencyDetail = "filesystem", "frozen through the agent: /"
				}
				if err := ss.CreateSnapshot(ctx, sn); err != nil || sn.ID == 0 {
					t.Fatalf("CreateSnapshot(%s) = %v, id %d", name, err, sn.ID)
				}
			}
			if err := ss.CreateSnapshot(ctx, &record.Snapshot{InstanceID: other.ID, Name: "a", Backend: "sim"}); err != nil {
				t.Fatalf("same name on another instance: %v", err)
			}
			steps := []struct {
				name string
				err  error
				run  func() error
			}{
				{"duplicate", db.ErrAlreadyExists, func() error {
					return ss.CreateSnapshot(ctx, &record.Snapshot{InstanceID: in.ID, Name: "a", Backend: "sim"})
				}},
				{"no name", db.ErrInvalid, func() error { return ss.CreateSnapshot(ctx, &record.Snapshot{InstanceID: in.ID}) }},
				{"rename onto existing", db.ErrAlreadyExists, func() error { return ss.RenameSnapshot(ctx, in.ID, "a", "b") }},
				{"rename unknown", db.ErrNotFound, func() error { return ss.RenameSnapshot(ctx, in.ID, "zz", "c") }},
				{"rename", nil, func() error { return ss.RenameSnapshot(ctx, in.ID, "a", "c") }},
				{"get renamed", nil, func() error {
					sn, err := ss.Snapshot(ctx, in.ID, "c")
					if err == nil && (sn.Config["user.x"] != "a" || sn.Stateful || !sn.Ready) {
						t.Errorf("renamed snapshot = %+v", sn)
					}
					// No consistency given: the column's default, as for
					// the rows stored before it (never frozen).
					if err == nil && (sn.Consistency != "crash" || sn.ConsistencyDetail != "") {
						t.Errorf("default consistency = %q (%q), want crash", sn.Consistency, sn.ConsistencyDetail)
					}
					return err
				}},
				{"consistency kept", nil, func() error {
					sn, err := ss.Snapshot(ctx, in.ID, "b")
					if err == nil && (sn.Consistency != "filesystem" || sn.ConsistencyDetail != "frozen through the agent: /") {
						t.Errorf("stored consistency = %q (%q)", sn.Consistency, sn.ConsistencyDetail)
					}
					return err
				}},
				{"get old name", db.ErrNotFound, func() error { _, err := ss.Snapshot(ctx, in.ID, "a"); return err }},
				{"delete unknown", db.ErrNotFound, func() error { return ss.DeleteSnapshot(ctx, in.ID, "a") }},
				{"delete", nil, func() error { return ss.DeleteSnapshot(ctx, in.ID, "c") }},
			}
			for _, st := range steps {
				if err := st.run(); !errors.Is(err, st.err) || (st.err == nil && err != nil) {
					t.Errorf("%s: err = %v, want %v", st.name, err, st.err)
				}
			}
			list, err := ss.Snapshots(ctx, in.ID)
			if err != nil || len(list) != 1 || list[0].Name != "b" || !list[0].Stateful || list[0].Details["layout"] != "legacy" {
				t.Fatalf("Snapshots = %+v, %v; want only b", list, err)
			}
			if err := s.DeleteInstance(ctx, in.ID); err != nil {
				t.Fatal(err)
			}
			if list, err := ss.Snapshots(ctx, in.ID); err != nil || len(list) != 0 {
				t.Errorf("after deleting the instance: %d snapshots, %v", len(list), err)
			}
			if list, err := ss.Snapshots(ctx, other.ID); err != nil || len(list) != 1 {
				t.Errorf("other instance's snapshots: %d, %v", len(list), err)
			}
		})
	}
}
