package db_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/membership"
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
			s := st.(membership.Store)
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
			a := &membership.Member{Name: "a", Address: "127.0.0.1:1", Fingerprint: hash(1), Heartbeat: now, CreatedAt: now}
			if err := s.Bootstrap(ctx, &membership.Cluster{UUID: "c-1", CACert: "PEM", CreatedAt: now}, a); err != nil {
				t.Fatal(err)
			}
			if err := s.Bootstrap(ctx, &membership.Cluster{UUID: "c-2", CACert: "PEM", CreatedAt: now}, &membership.Member{Name: "z", Heartbeat: now, CreatedAt: now}); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a second bootstrap: %v, want already exists", err)
			}
			if got, err := st.GetInstance(ctx, "old"); err != nil || got.Location != "a" {
				t.Errorf("the instance from before the cluster: location %q (%v), want a", got.Location, err)
			}

			tokens := []*membership.Token{
				{Name: "b", Hash: hash(10), ExpiresAt: now.Add(time.Hour), CreatedAt: now},
				{Name: "c", Hash: hash(11), ExpiresAt: now.Add(-time.Second), CreatedAt: now},
			}
			for _, tok := range tokens {
				if err := s.CreateClusterToken(ctx, tok); err != nil {
					t.Fatal(err)
				}
			}
			member := func(name string) *membership.Member {
				return &membership.Member{Name: name, Address: "127.0.0.1:2", Fingerprint: hash(2), Heartbeat: now, CreatedAt: now}
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
			bm, err := s.Member(ctx, "b")
			if err != nil || bm.Epoch != 2 {
				t.Fatalf("b joined after a (epoch 1): epoch %d (%v), want 2", bm.Epoch, err)
			}
			if err := s.Heartbeat(ctx, "b", bm.Epoch, "127.0.0.1:3", "v2", []string{"sim", "qemu"}, later); err != nil {
				t.Fatal(err)
			}
			if m, err := s.Member(ctx, "b"); err != nil || !m.Heartbeat.Equal(later) || m.Address != "127.0.0.1:3" || !slices.Equal(m.Backends, []string{"sim", "qemu"}) {
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
			if _, err := s.RemoveMember(ctx, "b", false); !errors.Is(err, errdefs.ErrConflict) || !contains(err, "still owns 1 instance") {
				t.Errorf("removing b, which owns an instance: %v", err)
			}
			if left, err := s.RemoveMember(ctx, "b", true); err != nil || !slices.Equal(left, []string{"onb"}) {
				t.Errorf("removing b with force: left %v (%v), want [onb]", left, err)
			}
			if err := s.Heartbeat(ctx, "b", bm.Epoch, "", "", nil, later); !errors.Is(err, db.ErrLeaseLost) || !contains(err, "member b was removed") {
				t.Errorf("a removed member's heartbeat: %v, want its lease lost", err)
			}
			if _, err := s.RemoveMember(ctx, "nobody", true); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("removing an unknown member: %v, want not found", err)
			}
		})
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestLeaseFencing holds member f's instance under f's lease on
// PostgreSQL (leases exist only there): writes under the lease land; once
// f is removed every write under its lease (update, delete, create, Ready
// clearing) is refused with ErrLeaseLost, the lost callback is called
// once, and the row keeps the last write made under the lease; a new f
// (a re-join: a new epoch) writes, the old lease stays fenced.
func TestLeaseFencing(t *testing.T) {
	ctx := testContext(t)
	url := dbtest.PostgresURL(t)
	oldF, newF := dbtest.Open(t, url), dbtest.Open(t, url)
	s := oldF.(membership.Store)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.Bootstrap(ctx, &membership.Cluster{UUID: "c-1", CACert: "PEM", CreatedAt: now},
		&membership.Member{Name: "a", Address: "127.0.0.1:1", Fingerprint: hash(1), Heartbeat: now, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	join := func(secret int) *membership.Member {
		t.Helper()
		if err := s.CreateClusterToken(ctx, &membership.Token{Name: "f", Hash: hash(secret), ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		m := &membership.Member{Name: "f", Address: "127.0.0.1:2", Fingerprint: hash(secret), Heartbeat: now, CreatedAt: now}
		if err := s.Join(ctx, hash(secret), m, now); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// A second token for f, issued before f joins, is revoked by the join.
	if err := s.CreateClusterToken(ctx, &membership.Token{Name: "f", Hash: hash(40), ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	f1 := join(41)
	if err := s.Join(ctx, hash(40), &membership.Member{Name: "f", Heartbeat: now, CreatedAt: now}, now); !errors.Is(err, errdefs.ErrConflict) || !contains(err, "revoked") {
		t.Errorf("f's second token after f joined: %v, want revoked", err)
	}
	lost := make(chan error, 2)
	s.SetLease(membership.Lease{Member: "f", Epoch: f1.Epoch}, func(err error) { lost <- err })

	inst := &db.Instance{Name: "g", UUID: "u-g", Backend: "sim", PowerState: "running", Location: "f", Config: map[string]string{}}
	if err := oldF.CreateInstance(ctx, inst); err != nil {
		t.Fatalf("creating under the lease: %v", err)
	}
	inst.Config["user.k"] = "1"
	if err := oldF.UpdateInstance(ctx, inst); err != nil {
		t.Fatalf("updating under the lease: %v", err)
	}

	if _, err := s.RemoveMember(ctx, "f", true); err != nil {
		t.Fatal(err)
	}
	inst.Config["user.k"] = "2"
	for _, tc := range []struct {
		what  string
		write func() error
	}{
		{"update", func() error { return oldF.UpdateInstance(ctx, inst) }},
		{"delete", func() error { return oldF.DeleteInstance(ctx, inst.ID) }},
		{"create", func() error {
			return oldF.CreateInstance(ctx, &db.Instance{Name: "h", UUID: "u-h", Backend: "sim", PowerState: "stopped", Location: "f"})
		}},
		{"ready clearing", func() error { _, err := oldF.ClearReadyAt(ctx, "f"); return err }},
	} {
		if err := tc.write(); !errors.Is(err, db.ErrLeaseLost) || !errors.Is(err, errdefs.ErrUnavailable) || !contains(err, "member f was removed") {
			t.Errorf("%s by a removed member: %v, want its lease lost (unavailable)", tc.what, err)
		}
	}
	if err := <-lost; !contains(err, "member f was removed") {
		t.Errorf("lost callback: %v", err)
	}
	select {
	case err := <-lost:
		t.Errorf("lost callback called twice (second: %v)", err)
	default:
	}

	// f joins again: a new epoch; its writes land, the old lease stays fenced.
	f2 := join(42)
	if f2.Epoch <= f1.Epoch {
		t.Fatalf("f re-joined with epoch %d, want more than %d", f2.Epoch, f1.Epoch)
	}
	newF.(membership.Store).SetLease(membership.Lease{Member: "f", Epoch: f2.Epoch}, nil)
	got, err := newF.GetInstance(ctx, "g")
	if err != nil || got.Config["user.k"] != "1" {
		t.Fatalf("g after the removal: %v (%v), want user.k=1 (the last write under the lease)", got, err)
	}
	got.Config["user.k"] = "3"
	if err := newF.UpdateInstance(ctx, got); err != nil {
		t.Fatalf("the new f's write: %v", err)
	}
	if err := s.Heartbeat(ctx, "f", f1.Epoch, "", "", nil, now); !errors.Is(err, db.ErrLeaseLost) || !contains(err, "joined the cluster again") {
		t.Errorf("the old f's heartbeat after the re-join: %v, want its lease lost (re-joined)", err)
	}
	if err := oldF.UpdateInstance(ctx, inst); !errors.Is(err, db.ErrLeaseLost) {
		t.Errorf("the old f's write after the re-join: %v, want its lease lost", err)
	}
	if got, _ := newF.GetInstance(ctx, "g"); got.Config["user.k"] != "3" {
		t.Errorf("g: user.k=%q, want 3 (the new f's write)", got.Config["user.k"])
	}
}
