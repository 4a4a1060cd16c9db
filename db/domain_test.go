package db_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// TestDomainRoundTrip stores an instance with every field of
// record.Instance set (checked by reflection, so a field added to the
// domain type and forgotten by db's private model fails here) and reads it
// back by name, by uuid and in a list: each read equals what was written.
// A timeline entry and an event go through the same way.
func TestDomainRoundTrip(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			st := dbtest.Open(t, e.URL(t))
			at := time.Now().UTC().Truncate(time.Microsecond)
			started := at.Add(time.Second)
			in := &record.Instance{Name: "full", UUID: "u-full", Backend: "sim",
				Config:  map[string]string{"user.k": "v"},
				Devices: map[string]map[string]string{"eth0": {"type": "nic"}},
				Handle:  []byte{1, 2, 3}, PowerState: "running", Boot: 4, Location: "m1",
				CreatedAt: at, StartedAt: &started, UpdatedAt: at, Profiles: []string{"default"}}
			v := reflect.ValueOf(in).Elem()
			for i := range v.NumField() {
				if v.Field(i).IsZero() && v.Type().Field(i).Name != "ID" {
					t.Fatalf("the test leaves record.Instance.%s zero: set it, so its round trip is checked", v.Type().Field(i).Name)
				}
			}
			if err := st.CreateInstance(ctx, in); err != nil {
				t.Fatal(err)
			}
			if in.ID == 0 {
				t.Fatal("CreateInstance did not set the ID")
			}
			// UpdateInstance never writes profiles; the created row has them.
			byName, err := st.GetInstance(ctx, "full")
			if err != nil {
				t.Fatal(err)
			}
			byUUID, err := st.GetInstanceByUUID(ctx, "u-full")
			if err != nil {
				t.Fatal(err)
			}
			list, err := st.ListInstances(ctx, record.Filter{Location: "m1"})
			if err != nil || len(list) != 1 {
				t.Fatalf("ListInstances: %d instances, %v; want 1", len(list), err)
			}
			for what, got := range map[string]*record.Instance{"by name": byName, "by uuid": byUUID, "listed": list[0]} {
				if !reflect.DeepEqual(got, in) {
					t.Errorf("read %s: %+v, want %+v", what, got, in)
				}
			}

			entry := &record.TimelineEntry{InstanceID: in.ID, Time: at, Boot: 4, Kind: "ready", From: "false", To: "true", Cause: "agent", Detail: "d"}
			if err := st.AppendTimeline(ctx, entry); err != nil {
				t.Fatal(err)
			}
			entries, err := st.ListTimeline(ctx, in.ID, 0)
			if err != nil || len(entries) != 1 || !reflect.DeepEqual(entries[0], entry) {
				t.Errorf("ListTimeline: %+v, %v; want [%+v]", entries, err, entry)
			}

			ev := &events.Record{Time: at, Type: "lifecycle", Instance: "full", Body: []byte(`{"type":"lifecycle"}`)}
			if err := st.AppendEvent(ctx, ev); err != nil {
				t.Fatal(err)
			}
			evs, err := st.EventsAfter(ctx, 0, 0)
			if err != nil || len(evs) != 1 || !reflect.DeepEqual(evs[0], ev) {
				t.Errorf("EventsAfter: %+v, %v; want [%+v]", evs, err, ev)
			}
		})
	}
}

// TestDomainErrors checks the store's errors are the errdefs kinds the
// services test (never a gorm error): a missing instance is not found, a
// taken name already exists, and after Close every call wraps
// errdefs.ErrClosed (and db.ErrClosed, whose text stays "store closed").
func TestDomainErrors(t *testing.T) {
	ctx := testContext(t)
	st := dbtest.SQLite(t)
	if _, err := st.GetInstance(ctx, "nobody"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetInstance of a missing name: %v, want not found", err)
	}
	in := &record.Instance{Name: "a", UUID: "u-a", Backend: "sim", PowerState: "stopped"}
	if err := st.CreateInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	dup := &record.Instance{Name: "a", UUID: "u-b", Backend: "sim", PowerState: "stopped"}
	if err := st.CreateInstance(ctx, dup); !errors.Is(err, errdefs.ErrAlreadyExists) || dup.ID != 0 {
		t.Errorf("CreateInstance of a taken name: %v (id %d), want already exists and no id", err, dup.ID)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"GetInstance":   func() error { _, err := st.GetInstance(ctx, "a"); return err }(),
		"ListInstances": func() error { _, err := st.ListInstances(ctx, record.Filter{}); return err }(),
		"ListTimeline":  func() error { _, err := st.ListTimeline(ctx, in.ID, 0); return err }(),
		"EventsAfter":   func() error { _, err := st.EventsAfter(ctx, 0, 0); return err }(),
		"LastEventID":   func() error { _, err := st.LastEventID(ctx); return err }(),
		"Profiles":      func() error { _, err := st.(record.ProfileStore).Profiles(ctx); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrClosed) || !errors.Is(err, db.ErrClosed) || !contains(err, "store closed") {
			t.Errorf("%s after Close: %v, want errdefs.ErrClosed (store closed)", what, err)
		}
	}
}

// TestLeaseLostIsDomainError removes a cluster member and checks that its
// refused instance writes wrap record.ErrLeaseLost, the kind core/instance
// tests to stop retrying, besides db.ErrLeaseLost and
// errdefs.ErrUnavailable, with the text unchanged (a narrow update's too:
// its version matches, the lease does not).
func TestLeaseLostIsDomainError(t *testing.T) {
	ctx := testContext(t)
	st := dbtest.Open(t, dbtest.PostgresURL(t))
	s := st.(membership.Store)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.Bootstrap(ctx, &membership.Cluster{UUID: "c-1", CACert: "PEM", CreatedAt: now},
		&membership.Member{Name: "a", Address: "127.0.0.1:1", Fingerprint: hash(1), Heartbeat: now, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateClusterToken(ctx, &membership.Token{Name: "f", Hash: hash(2), ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	m := &membership.Member{Name: "f", Address: "127.0.0.1:2", Fingerprint: hash(2), Heartbeat: now, CreatedAt: now}
	if err := s.Join(ctx, hash(2), m, now); err != nil {
		t.Fatal(err)
	}
	s.SetLease(membership.Lease{Member: "f", Epoch: m.Epoch}, func(error) {})
	in := &record.Instance{Name: "g", UUID: "u-g", Backend: "sim", PowerState: "running", Location: "f"}
	if err := st.CreateInstance(ctx, in); err != nil {
		t.Fatalf("creating under the lease: %v", err)
	}
	if _, err := s.RemoveMember(ctx, "f", true); err != nil {
		t.Fatal(err)
	}
	for what, write := range map[string]func() error{
		"update": func() error { return st.UpdateInstance(ctx, in) },
		"narrow update": func() error {
			next := cloneInstance(in)
			next.Config = map[string]string{"volatile.last_state.ready": "true"}
			return st.(changeFromWriter).WriteChangeFrom(ctx, in, next, nil, nil)
		},
		"delete": func() error { return st.DeleteInstance(ctx, in.ID) },
		"create": func() error {
			return st.CreateInstance(ctx, &record.Instance{Name: "h", UUID: "u-h", Backend: "sim", PowerState: "stopped", Location: "f"})
		},
		"ready clearing": func() error { _, err := st.ClearReadyAt(ctx, "f"); return err },
	} {
		err := write()
		if !errors.Is(err, record.ErrLeaseLost) || !errors.Is(err, db.ErrLeaseLost) || !errors.Is(err, errdefs.ErrUnavailable) || !contains(err, "member f was removed") {
			t.Errorf("%s by a removed member: %v, want record.ErrLeaseLost (and db's, unavailable)", what, err)
		}
	}
}
