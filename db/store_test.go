package db_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testTimeout bounds every test's calls; generous for a loaded machine.
const testTimeout = 2 * time.Minute

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newInstance(name string) *db.Instance {
	return &db.Instance{
		Name:       name,
		UUID:       uuid.NewString(),
		Backend:    "sim",
		Config:     map[string]string{"user.a": "1"},
		Devices:    map[string]map[string]string{"root": {"type": "disk"}},
		PowerState: "stopped",
	}
}

func mustCreate(ctx context.Context, t *testing.T, s db.Store, in *db.Instance) *db.Instance {
	t.Helper()
	if err := s.CreateInstance(ctx, in); err != nil {
		t.Fatalf("CreateInstance(%q): %v", in.Name, err)
	}
	if in.ID == 0 {
		t.Fatalf("CreateInstance(%q) left ID 0", in.Name)
	}
	return in
}

// storeTests is the suite every engine runs.
var storeTests = []struct {
	name string
	run  func(t *testing.T, s db.Store)
}{
	{"CreateGetList", testCreateGetList},
	{"DuplicateName", testDuplicate},
	{"NotFound", testNotFound},
	{"InvalidInput", testInvalid},
	{"UpdateWithTimeline", testUpdateWithTimeline},
	{"AppendTimelineSeveral", testAppendSeveral},
	{"CascadeDelete", testCascadeDelete},
	{"ClearReadyAll", testClearReadyAll},
	{"LastBecameReady", testLastBecameReady},
	{"Events", testEvents},
	{"EventIDsMonotonicUnderConcurrency", testEventIDsConcurrent},
	{"GroupCommitAllChangesPresent", testGroupCommit},
	{"GroupCommitFailingCallFailsAlone", testGroupCommitFailure},
	{"Closed", testClosed},
}

func TestStore(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			for _, tc := range storeTests {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, dbtest.Open(t, e.URL(t)))
				})
			}
		})
	}
}

var cmpInstance = cmp.Options{
	cmpopts.EquateApproxTime(time.Microsecond),
}

func testCreateGetList(t *testing.T, s db.Store) {
	ctx := testContext(t)
	started := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.FixedZone("x", 3600))
	a := newInstance("a1")
	a.PowerState = "running"
	a.StartedAt = &started
	a.Handle = []byte{0, 1, 2, 0xff}
	a.Boot = 3
	mustCreate(ctx, t, s, a)
	b := newInstance("b1")
	b.Backend = "qemu"
	b.Config = nil // stored and returned as an empty map
	mustCreate(ctx, t, s, b)
	mustCreate(ctx, t, s, newInstance("c1"))

	got, err := s.GetInstance(ctx, "a1")
	if err != nil {
		t.Fatalf("GetInstance: %v", err)
	}
	if diff := cmp.Diff(a, got, cmpInstance); diff != "" {
		t.Errorf("GetInstance(a1) mismatch (-want +got):\n%s", diff)
	}
	if got.CreatedAt.IsZero() || got.StartedAt.Location() != time.UTC {
		t.Errorf("times not set/normalised: created %v started %v", got.CreatedAt, got.StartedAt)
	}
	byUUID, err := s.GetInstanceByUUID(ctx, b.UUID)
	if err != nil {
		t.Fatalf("GetInstanceByUUID: %v", err)
	}
	if byUUID.Name != "b1" || byUUID.Config == nil || len(byUUID.Config) != 0 {
		t.Errorf("GetInstanceByUUID = %q config %#v, want b1 with empty config", byUUID.Name, byUUID.Config)
	}

	for _, tc := range []struct {
		name   string
		filter db.InstanceFilter
		want   []string
	}{
		{"all", db.InstanceFilter{}, []string{"a1", "b1", "c1"}},
		{"backend", db.InstanceFilter{Backend: "sim"}, []string{"a1", "c1"}},
		{"power", db.InstanceFilter{PowerState: "running"}, []string{"a1"}},
		{"both", db.InstanceFilter{Backend: "qemu", PowerState: "stopped"}, []string{"b1"}},
		{"none", db.InstanceFilter{Backend: "nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := s.ListInstances(ctx, tc.filter)
			if err != nil {
				t.Fatalf("ListInstances: %v", err)
			}
			var names []string
			for _, in := range list {
				names = append(names, in.Name)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func testDuplicate(t *testing.T, s db.Store) {
	ctx := testContext(t)
	first := mustCreate(ctx, t, s, newInstance("dup"))
	for _, tc := range []struct {
		name string
		in   *db.Instance
	}{
		{"same name", newInstance("dup")},
		{"same uuid", &db.Instance{Name: "other", UUID: first.UUID, Backend: "sim", PowerState: "stopped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CreateInstance(ctx, tc.in)
			if !errors.Is(err, db.ErrAlreadyExists) {
				t.Fatalf("CreateInstance = %v, want ErrAlreadyExists", err)
			}
			if tc.in.ID != 0 {
				t.Errorf("failed create left ID %d", tc.in.ID)
			}
		})
	}
	t.Run("rename onto existing", func(t *testing.T) {
		other := mustCreate(ctx, t, s, newInstance("dup2"))
		other.Name = "dup"
		if err := s.UpdateInstance(ctx, other); !errors.Is(err, db.ErrAlreadyExists) {
			t.Fatalf("UpdateInstance = %v, want ErrAlreadyExists", err)
		}
	})
}

func testNotFound(t *testing.T, s db.Store) {
	ctx := testContext(t)
	ghost := newInstance("ghost")
	ghost.ID = 424242
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"GetInstance", func() error { _, err := s.GetInstance(ctx, "ghost"); return err }},
		{"GetInstanceByUUID", func() error { _, err := s.GetInstanceByUUID(ctx, ghost.UUID); return err }},
		{"UpdateInstance", func() error { return s.UpdateInstance(ctx, ghost) }},
		{"UpdateInstanceWithTimeline", func() error {
			return s.UpdateInstanceWithTimeline(ctx, ghost, &record.TimelineEntry{Kind: "state", To: "running"})
		}},
		{"DeleteInstance", func() error { return s.DeleteInstance(ctx, ghost.ID) }},
		{"AppendTimeline", func() error {
			return s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: ghost.ID, Kind: "state", To: "running"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, db.ErrNotFound) {
				t.Fatalf("%s = %v, want ErrNotFound", tc.name, err)
			}
		})
	}
}

func testInvalid(t *testing.T, s db.Store) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"nil instance", func() error { return s.CreateInstance(ctx, nil) }},
		{"no name", func() error { return s.CreateInstance(ctx, &db.Instance{UUID: uuid.NewString()}) }},
		{"no uuid", func() error { return s.CreateInstance(ctx, &db.Instance{Name: "x"}) }},
		{"update without id", func() error { return s.UpdateInstance(ctx, newInstance("x")) }},
		{"nil entry", func() error { return s.AppendTimeline(ctx, nil) }},
		{"entry without instance", func() error { return s.AppendTimeline(ctx, &record.TimelineEntry{Kind: "state"}) }},
		{"name too long (64 characters)", func() error { return s.CreateInstance(ctx, newInstance(strings.Repeat("x", 64))) }},
		{"name not utf-8", func() error { return s.CreateInstance(ctx, newInstance("bad\xff")) }},
		{"name with NUL", func() error { return s.CreateInstance(ctx, newInstance("bad\x00")) }},
		{"detail with NUL", func() error {
			in := mustCreate(ctx, t, s, newInstance("nul-detail"))
			return s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: in.ID, Kind: "state", To: "x", Detail: "a\x00b"})
		}},
		{"event type too long", func() error { return s.AppendEvent(ctx, &events.Record{Type: strings.Repeat("t", 33)}) }},
		{"nil event", func() error { return s.AppendEvent(ctx, nil) }},
		{"event without type", func() error { return s.AppendEvent(ctx, &events.Record{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, db.ErrInvalid) {
				t.Fatalf("%s = %v, want ErrInvalid", tc.name, err)
			}
		})
	}
}

func testUpdateWithTimeline(t *testing.T, s db.Store) {
	ctx := testContext(t)
	in := mustCreate(ctx, t, s, newInstance("u1"))
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		in.Boot = int64(i + 1)
		in.PowerState = []string{"running", "stopped"}[i%2]
		in.Config["volatile.n"] = fmt.Sprint(i)
		e := &record.TimelineEntry{Time: base.Add(time.Duration(i) * time.Second), Boot: in.Boot, Kind: "state", From: "x", To: in.PowerState, Cause: "api"}
		if err := s.UpdateInstanceWithTimeline(ctx, in, e); err != nil {
			t.Fatalf("UpdateInstanceWithTimeline #%d: %v", i, err)
		}
		if e.ID == 0 || e.InstanceID != in.ID {
			t.Fatalf("entry #%d: ID %d InstanceID %d, want set and %d", i, e.ID, e.InstanceID, in.ID)
		}
	}
	got, err := s.GetInstance(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Boot != 5 || got.PowerState != "running" || got.Config["volatile.n"] != "4" || got.Config["user.a"] != "1" {
		t.Errorf("after updates: boot %d power %q config %v", got.Boot, got.PowerState, got.Config)
	}
	for _, tc := range []struct {
		limit     int
		wantBoots []int64
	}{
		{0, []int64{1, 2, 3, 4, 5}},
		{2, []int64{4, 5}},
		{10, []int64{1, 2, 3, 4, 5}},
	} {
		t.Run(fmt.Sprintf("limit=%d", tc.limit), func(t *testing.T) {
			entries, err := s.ListTimeline(ctx, in.ID, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var boots []int64
			for _, e := range entries {
				boots = append(boots, e.Boot)
			}
			if diff := cmp.Diff(tc.wantBoots, boots); diff != "" {
				t.Errorf("boots (-want +got):\n%s", diff)
			}
		})
	}
	// UpdateInstance keeps the stored creation time whatever in says.
	created := got.CreatedAt
	got.CreatedAt = time.Time{}
	got.PowerState = "error"
	if err := s.UpdateInstance(ctx, got); err != nil {
		t.Fatal(err)
	}
	if again, err := s.GetInstance(ctx, "u1"); err != nil || !again.CreatedAt.Equal(created) || again.PowerState != "error" || !again.UpdatedAt.After(created) {
		t.Errorf("after UpdateInstance: created %v (want %v), power %q, updated %v, err %v", again.CreatedAt, created, again.PowerState, again.UpdatedAt, err)
	}
	in.PowerState = "error"
	// A failing update (rename onto another name) appends nothing.
	mustCreate(ctx, t, s, newInstance("u2"))
	in.Name = "u2"
	err = s.UpdateInstanceWithTimeline(ctx, in, &record.TimelineEntry{Kind: "state", To: "error"})
	if !errors.Is(err, db.ErrAlreadyExists) {
		t.Fatalf("conflicting update = %v, want ErrAlreadyExists", err)
	}
	if entries, _ := s.ListTimeline(ctx, in.ID, 0); len(entries) != 5 {
		t.Errorf("after failed update: %d entries, want 5 (transaction not atomic)", len(entries))
	}
}

func testAppendSeveral(t *testing.T, s db.Store) {
	ctx := testContext(t)
	a := mustCreate(ctx, t, s, newInstance("s1"))
	b := mustCreate(ctx, t, s, newInstance("s2"))
	entries := []*record.TimelineEntry{
		{InstanceID: a.ID, Kind: "state", To: "running", Detail: "a0"},
		{InstanceID: b.ID, Kind: "state", To: "running", Detail: "b0"},
		{InstanceID: a.ID, Kind: "ready", To: "true", Detail: "a1"},
	}
	if err := s.AppendTimeline(ctx, entries...); err != nil {
		t.Fatal(err)
	}
	ids := map[int64]string{}
	for _, e := range entries {
		ids[e.ID] = e.Detail
	}
	if len(ids) != 3 {
		t.Fatalf("entry ids not distinct: %v", ids)
	}
	for _, in := range []*db.Instance{a, b} {
		stored, err := s.ListTimeline(ctx, in.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range stored {
			if ids[e.ID] != e.Detail {
				t.Errorf("stored entry %d has detail %q, AppendTimeline reported %q", e.ID, e.Detail, ids[e.ID])
			}
		}
	}
	// A long call is split into several INSERTs; ids must still match.
	many := make([]*record.TimelineEntry, 1234)
	for i := range many {
		many[i] = &record.TimelineEntry{InstanceID: b.ID, Kind: "agent", To: "connected", Detail: fmt.Sprintf("m%d", i)}
	}
	if err := s.AppendTimeline(ctx, many...); err != nil {
		t.Fatalf("AppendTimeline of %d entries: %v", len(many), err)
	}
	storedB, err := s.ListTimeline(ctx, b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]string{}
	for _, e := range storedB {
		byID[e.ID] = e.Detail
	}
	// More than the retention: the writer prunes the oldest in the
	// background, maybe before the list. The newest must all be there.
	keepFrom := max(0, len(many)-db.DefaultTimelineRetention)
	for i, e := range many {
		if d, ok := byID[e.ID]; (i >= keepFrom && !ok) || (ok && d != e.Detail) {
			t.Fatalf("entry reported as id %d (%s) is stored as %q", e.ID, e.Detail, d)
		}
	}
	// One bad entry fails the whole call and stores nothing.
	bad := []*record.TimelineEntry{
		{InstanceID: a.ID, Kind: "state", To: "stopped", Detail: "a2"},
		{InstanceID: b.ID + 1000, Kind: "state", To: "stopped"},
	}
	if err := s.AppendTimeline(ctx, bad...); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("AppendTimeline with an orphan entry = %v, want ErrNotFound", err)
	}
	if bad[0].ID != 0 {
		t.Errorf("failed append left ID %d on its first entry", bad[0].ID)
	}
	if stored, _ := s.ListTimeline(ctx, a.ID, 0); len(stored) != 2 {
		t.Errorf("after failed append: %d entries for s1, want 2", len(stored))
	}
}

func testCascadeDelete(t *testing.T, s db.Store) {
	ctx := testContext(t)
	keep := mustCreate(ctx, t, s, newInstance("keep"))
	gone := mustCreate(ctx, t, s, newInstance("gone"))
	for _, id := range []int64{keep.ID, gone.ID} {
		if err := s.AppendTimeline(ctx, &record.TimelineEntry{InstanceID: id, Kind: "state", To: "running"},
			&record.TimelineEntry{InstanceID: id, Kind: "agent", To: "started"}); err != nil {
			t.Fatalf("AppendTimeline: %v", err)
		}
	}
	if err := s.DeleteInstance(ctx, gone.ID); err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if _, err := s.GetInstance(ctx, "gone"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("GetInstance after delete = %v, want ErrNotFound", err)
	}
	if entries, err := s.ListTimeline(ctx, gone.ID, 0); err != nil || len(entries) != 0 {
		t.Errorf("timeline of deleted instance: %d entries, err %v; want none", len(entries), err)
	}
	if entries, err := s.ListTimeline(ctx, keep.ID, 0); err != nil || len(entries) != 2 {
		t.Errorf("timeline of kept instance: %d entries, err %v; want 2", len(entries), err)
	}
	if err := s.DeleteInstance(ctx, gone.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("second DeleteInstance = %v, want ErrNotFound", err)
	}
}

func testClearReadyAll(t *testing.T, s db.Store) {
	ctx := testContext(t)
	const ready = "volatile.last_state.ready"
	configs := map[string]map[string]string{
		"r-true":  {ready: "true", "user.x": "y"},
		"r-false": {ready: "false"},
		"r-none":  {"user.x": "y"},
		"r-decoy": {"user.note": `"` + ready + `":"true"`, "user.k": ready},
		"r-empty": {},
	}
	for name, cfg := range configs {
		in := newInstance(name)
		in.Config = cfg
		mustCreate(ctx, t, s, in)
	}
	n, err := s.ClearReadyAll(ctx)
	if err != nil {
		t.Fatalf("ClearReadyAll: %v", err)
	}
	if n != 2 {
		t.Errorf("ClearReadyAll changed %d instances, want 2", n)
	}
	for name, cfg := range configs {
		want := map[string]string{}
		for k, v := range cfg {
			if k != ready {
				want[k] = v
			}
		}
		got, err := s.GetInstance(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got.Config); diff != "" {
			t.Errorf("config of %s (-want +got):\n%s", name, diff)
		}
	}
	if n, err := s.ClearReadyAll(ctx); err != nil || n != 0 {
		t.Errorf("second ClearReadyAll = %d, %v; want 0, nil", n, err)
	}
}

func testLastBecameReady(t *testing.T, s db.Store) {
	ctx := testContext(t)
	in := mustCreate(ctx, t, s, newInstance("r1"))
	other := mustCreate(ctx, t, s, newInstance("r2"))
	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	entry := func(id, boot int64, sec int, kind, from, to string) *record.TimelineEntry {
		return &record.TimelineEntry{InstanceID: id, Boot: boot, Time: at(sec), Kind: kind, From: from, To: to, Cause: "devlxd"}
	}
	if err := s.AppendTimeline(ctx,
		entry(in.ID, 1, 1, "ready", "false", "true"), // boot 1 became Ready
		entry(in.ID, 2, 10, "state", "stopped", "running"),
		entry(in.ID, 2, 11, "ready", "", "true"), // a re-declaration after a restart: not a false -> true
		entry(in.ID, 2, 12, "ready", "false", "true"),
		entry(in.ID, 2, 13, "ready", "true", "false"),
		entry(in.ID, 2, 14, "ready", "false", "true"), // the newest of boot 2
		entry(in.ID, 2, 15, "agent", "false", "true"), // another kind
		entry(in.ID, 3, 20, "state", "stopped", "running"),
		entry(other.ID, 3, 30, "ready", "false", "true"), // another instance
	); err != nil {
		t.Fatalf("AppendTimeline: %v", err)
	}
	tests := []struct {
		name   string
		id     int64
		boot   int64
		want   time.Time
		wantOK bool
	}{
		{"the newest false -> true of the boot", in.ID, 2, at(14), true},
		{"an older boot", in.ID, 1, at(1), true},
		{"a boot never Ready", in.ID, 3, time.Time{}, false},
		{"no such boot", in.ID, 9, time.Time{}, false},
		{"no such instance", 987654, 2, time.Time{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := s.LastBecameReady(ctx, tc.id, tc.boot)
			if err != nil {
				t.Fatalf("LastBecameReady: %v", err)
			}
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("LastBecameReady(%d, %d) = %v, %v; want %v, %v", tc.id, tc.boot, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
