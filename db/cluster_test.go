package db_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// TestClusterStore runs membership through every engine: bootstrap (once),
// join tokens (unknown, used, expired, for another name), heartbeats,
// removal refused while a member owns instances, location-scoped lists
// and Ready clearing.
func TestClusterStore(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			st := dbtest.Open(t, e.URL(t))
			s := st.(db.ClusterStore)
			now := time.Now().UTC().Truncate(time.Microsecond)

			if _, err := s.Cluster(ctx); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("Cluster on a fresh database: %v, want not found", err)
			}
			// An instance from before the cluster goes to the first member.
			old := &db.Instance{Name: "old", UUID: "u-old", Backend: "sim", PowerState: "stopped",
				Config: map[string]string{"volatile.last_state.ready": "true"}}
			if err := st.CreateInstance(ctx, old); err != nil {
				t.Fatal(err)
			}
			a := &db.ClusterMember{Name: "a", Address: "127.0.0.1:1", Fingerprint: hash(1), Heartbeat: now, CreatedAt: now}
			if err := s.Bootstrap(ctx, &db.ClusterInfo{UUID: "c-1", CACert: "PEM", CreatedAt: now}, a); err != nil {
				t.Fatal(err)
			}
			if err := s.Bootstrap(ctx, &db.ClusterInfo{UUID: "c-2", CACert: "PEM", CreatedAt: now}, &db.ClusterMember{Name: "z", Heartbeat: now, CreatedAt: now}); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a second bootstrap: %v, want already exists", err)
			}
			if got, err := st.GetInstance(ctx, "old"); err != nil || got.Location != "a" {
				t.Errorf("the instance from before the cluster: location %q (%v), want a", got.Location, err)
			}

			tokens := []*db.ClusterToken{
				{Name: "b", Hash: hash(10), ExpiresAt: now.Add(time.Hour), CreatedAt: now},
				{Name: "c", Hash: hash(11), ExpiresAt: now.Add(-time.Second), CreatedAt: now},
			}
			for _, tok := range tokens {
				if err := s.CreateClusterToken(ctx, tok); err != nil {
					t.Fatal(err)
				}
			}
			member := func(name string) *db.ClusterMember {
				return &db.ClusterMember{Name: name, Address: "127.0.0.1:2", Fingerprint: hash(2), Heartbeat: now, CreatedAt: now}
			}
			for _, tc := range []struct {
				name, hash, member string
				want               error
				text               string
			}{
				{"unknown token", hash(99), "b", errdefs.ErrNotFound, "not valid"},
				{"token of another name", hash(10), "x", errdefs.ErrConflict, `admits member "b"`},
				{"expired token", hash(11), "c", errdefs.ErrConflict, "expired"},
				{"good token", hash(10), "b", nil, ""},
				{"reused token", hash(10), "b", errdefs.ErrConflict, "used already"},
			} {
				err := s.Join(ctx, tc.hash, member(tc.member), now)
				if tc.want == nil && err != nil || tc.want != nil && (!errors.Is(err, tc.want) || !contains(err, tc.text)) {
					t.Errorf("%s: Join = %v, want %v with %q", tc.name, err, tc.want, tc.text)
				}
			}
			ms, err := s.Members(ctx)
			if err != nil || len(ms) != 2 || ms[0].Name != "a" || ms[1].Name != "b" {
				t.Fatalf("Members = %v (%v), want a, b", ms, err)
			}
			later := now.Add(time.Minute)
			if err := s.Heartbeat(ctx, "b", "127.0.0.1:3", "v2", "sim,qemu", later); err != nil {
				t.Fatal(err)
			}
			if m, err := s.Member(ctx, "b"); err != nil || !m.Heartbeat.Equal(later) || m.Address != "127.0.0.1:3" || m.Backends != "sim,qemu" {
				t.Errorf("after a heartbeat: %+v (%v)", m, err)
			}

			onB := &db.Instance{Name: "onb", UUID: "u-b", Backend: "sim", PowerState: "running", Location: "b",
				Config: map[string]string{"volatile.last_state.ready": "true"}}
			if err := st.CreateInstance(ctx, onB); err != nil {
				t.Fatal(err)
			}
			if n, err := st.ClearReadyAt(ctx, "a"); err != nil || n != 1 {
				t.Errorf("ClearReadyAt(a) = %d, %v; want 1 (b's instance untouched)", n, err)
			}
			if got, _ := st.GetInstance(ctx, "onb"); got.Config["volatile.last_state.ready"] != "true" {
				t.Errorf("clearing a's Ready flags cleared b's")
			}
			if list, err := st.ListInstances(ctx, db.InstanceFilter{Location: "b"}); err != nil || len(list) != 1 || list[0].Name != "onb" {
				t.Errorf("ListInstances(location b) = %v, %v", list, err)
			}
			if counts, err := s.InstanceCounts(ctx); err != nil || counts["a"] != 1 || counts["b"] != 1 {
				t.Errorf("InstanceCounts = %v, %v", counts, err)
			}
			if err := s.RemoveMember(ctx, "b", false); !errors.Is(err, errdefs.ErrConflict) || !contains(err, "still owns 1 instance") {
				t.Errorf("removing b, which owns an instance: %v", err)
			}
			if err := s.RemoveMember(ctx, "b", true); err != nil {
				t.Errorf("removing b with force: %v", err)
			}
			if err := s.Heartbeat(ctx, "b", "", "", "", later); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("a removed member's heartbeat: %v, want not found", err)
			}
			if err := s.RemoveMember(ctx, "nobody", true); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("removing an unknown member: %v, want not found", err)
			}
		})
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
