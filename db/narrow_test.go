package db_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

// changeFromWriter is the store's narrow write, as core/instance calls it.
type changeFromWriter interface {
	WriteChangeFrom(ctx context.Context, prev, in *record.Instance, entries []*record.TimelineEntry, evs []*events.Record) error
}

// cloneInstance copies in deeply, as core/instance copies a record before
// changing it.
func cloneInstance(in *record.Instance) *record.Instance {
	c := *in
	c.Config = maps.Clone(in.Config)
	c.Devices = map[string]map[string]string{}
	for k, v := range in.Devices {
		c.Devices[k] = maps.Clone(v)
	}
	c.Handle = slices.Clone(in.Handle)
	if in.StartedAt != nil {
		t := *in.StartedAt
		c.StartedAt = &t
	}
	c.Profiles = slices.Clone(in.Profiles)
	return &c
}

// TestNarrowUpdate changes one field of a stored instance at a time with
// WriteChangeFrom (a config value, a config key added, a config key
// removed, each other field, a time set and cleared, nothing at all) and
// reads the row back. To see that only the changed column was written, a
// witness column the change leaves alone (the backend, or the power state
// when the change is the backend's) is first changed behind the store's
// back without moving updated_at: a narrow write keeps the witness's new
// value, a whole-row write would put the record's back. The row read back
// equals the domain's value with the witness as set, updated_at later than
// before and in.UpdatedAt the row's; the timeline entry and event written
// with it are there. On both engines.
func TestNarrowUpdate(t *testing.T) {
	started := time.Date(2026, 11, 28, 10, 0, 0, 123456000, time.UTC)
	cases := []struct {
		name   string
		change func(in *record.Instance)
	}{
		{"config value", func(in *record.Instance) { in.Config["volatile.last_state.ready"] = "true" }},
		{"config key added", func(in *record.Instance) { in.Config["user.new"] = "x" }},
		{"config key removed", func(in *record.Instance) { delete(in.Config, "user.role") }},
		{"config emptied", func(in *record.Instance) { clear(in.Config) }},
		{"name", func(in *record.Instance) { in.Name = "renamed" }},
		{"uuid", func(in *record.Instance) { in.UUID = "u-other" }},
		{"backend", func(in *record.Instance) { in.Backend = "qemu" }},
		{"device added", func(in *record.Instance) { in.Devices["eth0"] = map[string]string{"type": "nic"} }},
		{"device key removed", func(in *record.Instance) { delete(in.Devices["root"], "path") }},
		{"handle", func(in *record.Instance) { in.Handle = []byte{9, 9} }},
		{"handle cleared", func(in *record.Instance) { in.Handle = nil }},
		{"power state", func(in *record.Instance) { in.PowerState = "stopped" }},
		{"boot", func(in *record.Instance) { in.Boot++ }},
		{"location", func(in *record.Instance) { in.Location = "m2" }},
		{"started at", func(in *record.Instance) { s := started.Add(time.Minute); in.StartedAt = &s }},
		{"started at cleared", func(in *record.Instance) { in.StartedAt = nil }},
		{"nothing", func(in *record.Instance) {}},
	}
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			st := dbtest.Open(t, e.URL(t))
			w := st.(changeFromWriter)
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					in := &record.Instance{Name: "n" + string(rune('a'+i)), UUID: "u-" + tc.name, Backend: "sim",
						Config:  map[string]string{"user.role": "web", "limits.cpu": "2", "volatile.last_state.ready": "false"},
						Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}},
						Handle:  []byte{1, 2, 3}, PowerState: "running", Boot: 3, Location: "m1",
						StartedAt: &started, Profiles: []string{"default"}}
					if err := st.CreateInstance(ctx, in); err != nil {
						t.Fatal(err)
					}
					prev, err := st.GetInstance(ctx, in.Name)
					if err != nil {
						t.Fatal(err)
					}
					next := cloneInstance(prev)
					tc.change(next)
					want := cloneInstance(next)
					witness, value := "backend", "witness"
					want.Backend = value
					if tc.name == "backend" {
						witness, value = "power_state", "error"
						want.Backend, want.PowerState = next.Backend, value
					}
					if err := db.ExecForBench(st, `UPDATE instances SET `+witness+` = ? WHERE id = ?`, value, in.ID); err != nil {
						t.Fatal(err)
					}
					entry := &record.TimelineEntry{Boot: next.Boot, Kind: "ready", From: "false", To: "true", Cause: "agent"}
					ev := &events.Record{Type: "lifecycle", Instance: next.Name, Body: []byte(`{"type":"lifecycle"}`)}
					if err := w.WriteChangeFrom(ctx, prev, next, []*record.TimelineEntry{entry}, []*events.Record{ev}); err != nil {
						t.Fatalf("WriteChangeFrom: %v", err)
					}
					if !next.UpdatedAt.After(prev.UpdatedAt) {
						t.Errorf("updated_at %v after the write, want later than %v", next.UpdatedAt, prev.UpdatedAt)
					}
					want.UpdatedAt = next.UpdatedAt
					got, err := st.GetInstance(ctx, next.Name)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("read back:\n %+v\nwant (the change, %s left as set behind the store's back):\n %+v", got, witness, want)
					}
					tl, err := st.ListTimeline(ctx, in.ID, 0)
					if err != nil || len(tl) != 1 || tl[0].ID != entry.ID || entry.InstanceID != in.ID {
						t.Errorf("timeline: %+v, %v; want the entry written with the change", tl, err)
					}
					if ev.ID == 0 {
						t.Error("the event has no id")
					}
				})
			}
		})
	}
}

// TestNarrowUpdateStale writes from a prev that is no longer what the row
// holds, on both engines. Another writer saved the instance after prev was
// read (a config key and the power state changed): the narrow write's
// version check (updated_at) fails, and the whole record is written, as
// WriteChange writes it, so the row equals the domain's value, never a
// mix of the two writes. Then two writers start from the same prev at once
// (one changes a config key, the other the power state): each write
// succeeds, and the row equals one of the two records whole.
func TestNarrowUpdateStale(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := testContext(t)
			st := dbtest.Open(t, e.URL(t))
			w := st.(changeFromWriter)
			in := &record.Instance{Name: "stale", UUID: "u-stale", Backend: "sim", PowerState: "running", Boot: 1,
				Config: map[string]string{"user.a": "1", "user.b": "1"}}
			if err := st.CreateInstance(ctx, in); err != nil {
				t.Fatal(err)
			}
			prev, err := st.GetInstance(ctx, "stale")
			if err != nil {
				t.Fatal(err)
			}
			other := cloneInstance(prev)
			other.Config["user.b"] = "other"
			other.PowerState = "stopped"
			if err := st.UpdateInstance(ctx, other); err != nil {
				t.Fatal(err)
			}
			mine := cloneInstance(prev)
			mine.Config["user.a"] = "mine"
			if err := w.WriteChangeFrom(ctx, prev, mine, nil, nil); err != nil {
				t.Fatalf("a write from a stale record: %v", err)
			}
			got, err := st.GetInstance(ctx, "stale")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, mine) {
				t.Errorf("after a write from a stale record: %+v, want the record written whole %+v", got, mine)
			}

			base, err := st.GetInstance(ctx, "stale")
			if err != nil {
				t.Fatal(err)
			}
			for round := range 20 {
				a, b := cloneInstance(base), cloneInstance(base)
				a.Config["user.a"] = "a" + string(rune('0'+round%10))
				b.PowerState = map[bool]string{true: "running", false: "error"}[base.PowerState != "running"]
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, rec := range []*record.Instance{a, b} {
					wg.Go(func() { errs[i] = w.WriteChangeFrom(ctx, base, rec, nil, nil) })
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				got, err := st.GetInstance(ctx, "stale")
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, a) && !reflect.DeepEqual(got, b) {
					t.Fatalf("round %d: two writes from one record left %+v, want one of them whole:\n %+v\n %+v", round, got, a, b)
				}
				base = got
			}
		})
	}
}

// TestNarrowUpdateAfterReconnect ends every connection of a private
// PostgreSQL server, the writer's with its prepared statements, between two
// narrow writes of the config (the prepared statement's case): the first
// write after it may fail as unavailable (a write is not retried on a
// fresh connection; it may have reached the server), the next one succeeds
// on a new connection, where the statement is prepared again, and the row
// holds it.
func TestNarrowUpdateAfterReconnect(t *testing.T) {
	srv := dbtest.NewServer(t)
	ctx := testContext(t)
	st := dbtest.Open(t, srv.URL(t))
	w := st.(changeFromWriter)
	in := &record.Instance{Name: "pg", UUID: "u-pg", Backend: "sim", PowerState: "running", Config: map[string]string{}}
	if err := st.CreateInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	write := func(v string) error {
		prev, err := st.GetInstance(ctx, "pg")
		if err != nil {
			return err
		}
		next := cloneInstance(prev)
		next.Config["volatile.last_state.ready"] = v
		return w.WriteChangeFrom(ctx, prev, next, nil, nil)
	}
	if err := write("true"); err != nil {
		t.Fatal(err)
	}
	srv.TerminateConnections(t)
	err := write("false")
	if err != nil {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("the first write after the connections ended: %v, want success or unavailable", err)
		}
		if err = write("false"); err != nil {
			t.Fatalf("the write after an unavailable one: %v", err)
		}
	}
	got, err := st.GetInstance(ctx, "pg")
	if err != nil || got.Config["volatile.last_state.ready"] != "false" {
		t.Fatalf("after the reconnect: %+v, %v; want ready false", got, err)
	}
}
