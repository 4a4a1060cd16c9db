package instance

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestListCachedFuncVersion checks the change version ListCachedFunc hands
// out with each view: a heartbeat alone keeps it (the one change a cached
// value must not hold), every other change of the view moves it, and a
// value stored in the cache slot is loaded for its version only.
func TestListCachedFuncVersion(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	e.create("web2", nil)
	version := func() (uint64, *ViewCache) {
		t.Helper()
		var v uint64
		var c *ViewCache
		if err := e.m.ListCachedFunc(bg, ListFilter{Query: "web1"}, func(rows []CachedRow) error {
			for _, r := range rows {
				v, c = r.Version, r.Cache
				if r.Cached != c.Load(v) {
					t.Errorf("row's Cached %v, the slot holds %v for version %d", r.Cached, c.Load(v), v)
				}
			}
			return nil
		}); err != nil || c == nil {
			t.Fatalf("ListCachedFunc: %v, slot %v", err, c)
		}
		return v, c
	}
	v0, slot := version()
	slot.Store(v0, "encoded")
	for _, tt := range []struct {
		name  string
		moves bool
		step  func() error
	}{
		{"start", true, func() error { return e.m.Start(bg, "web1", adminCaller) }},
		{"agent started", true, func() error { return e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Unix(100, 0)) }},
		{"heartbeat alone", false, func() error {
			if !e.m.RecordHeartbeat(inst.UUID, AgentStarted, time.Unix(105, 0)) {
				t.Fatal("heartbeat not recorded alone")
			}
			return nil
		}},
		{"heartbeat through SetAgentState", false, func() error { return e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Unix(110, 0)) }},
		{"ready", true, func() error { return e.m.Declare(bg, inst.UUID, Declaration{State: DeclaredReady}, adminCaller) }},
		{"config", true, func() error {
			_, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.x": "1"}, nil, adminCaller)
			return err
		}},
		{"another instance", false, func() error {
			_, err := e.m.UpdateConfig(bg, "web2", map[string]string{"user.x": "1"}, nil, adminCaller)
			return err
		}},
	} {
		prev, _ := version()
		if err := tt.step(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		now, c := version()
		if c != slot {
			t.Fatalf("%s: the instance's cache slot changed", tt.name)
		}
		if moved := now != prev; moved != tt.moves {
			t.Errorf("%s: version %d -> %d, want moved %v", tt.name, prev, now, tt.moves)
		}
	}
	now, _ := version()
	if slot.Load(v0) != "encoded" || slot.Load(now) != nil {
		t.Errorf("the slot loads %v for its version, %v for the current one; want the value, then nil", slot.Load(v0), slot.Load(now))
	}
}

// TestCachedRowsMatchViews: ListCachedFunc's rows, in batches of at most
// ListBatch, are List's instances in List's order; each row's View is
// List's view (same JSON), and the parts a lister reads without the view
// (name, uuid, heartbeat) are the view's, for running guests with agents
// and heartbeats recorded alone, stopped ones and a deleted one.
func TestCachedRowsMatchViews(t *testing.T) {
	e := newEnv(t)
	const n = ListBatch + 44 // two batches
	var uuids []string
	for i := range n {
		inst := e.create(fmt.Sprintf("vm%03d", i), nil)
		uuids = append(uuids, inst.UUID)
		if i%3 == 0 {
			continue
		}
		if err := e.m.Start(bg, inst.Name, adminCaller); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			if err := e.m.SetAgentState(bg, inst.UUID, AgentConnected, time.Unix(100, 0)); err != nil {
				t.Fatal(err)
			}
			if !e.m.RecordHeartbeat(inst.UUID, AgentConnected, time.Unix(int64(200+i), 0)) {
				t.Fatal("heartbeat not recorded alone")
			}
		}
	}
	if err := e.m.Delete(bg, "vm001", true, adminCaller); err != nil {
		t.Fatal(err)
	}
	want, err := e.m.List(bg, ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Instance
	batches := 0
	err = e.m.ListCachedFunc(bg, ListFilter{}, func(rows []CachedRow) error {
		batches++
		if len(rows) == 0 || len(rows) > ListBatch {
			t.Errorf("a batch of %d rows", len(rows))
		}
		for i := range rows {
			r := &rows[i]
			v := r.View()
			if r.View() != v {
				t.Errorf("%s: View built twice", r.Name)
			}
			if r.Name != v.Name || r.UUID != v.UUID || r.GuestIPv4 != v.GuestIPv4 || r.LastHeartbeat != v.Agent.LastHeartbeat {
				t.Errorf("row %s/%s/%v differs from its view %s/%s/%v", r.Name, r.UUID, r.LastHeartbeat, v.Name, v.UUID, v.Agent.LastHeartbeat)
			}
			c := *v // a shallow copy stays valid
			got = append(got, &c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if batches != 2 || len(got) != len(want) || len(want) != n-1 {
		t.Fatalf("%d batches, %d rows, List %d instances", batches, len(got), len(want))
	}
	compare := func(pass string) {
		t.Helper()
		for i := range want {
			w, _ := json.Marshal(WireInstance(want[i], nil))
			g, _ := json.Marshal(WireInstance(got[i], nil))
			if string(w) != string(g) {
				t.Errorf("%s: row %d's view differs from List's:\n got %s\nwant %s", pass, i, g, w)
			}
		}
	}
	compare("slots empty")
	// Every slot filled: the rows are listed without their runtime (a
	// light snapshot), and a View asked all the same is still List's.
	fill := func(rows []CachedRow) error {
		for i := range rows {
			rows[i].Cache.Store(rows[i].Version, "kept")
		}
		return nil
	}
	if err := e.m.ListCachedFunc(bg, ListFilter{}, fill); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	err = e.m.ListCachedFunc(bg, ListFilter{}, func(rows []CachedRow) error {
		for i := range rows {
			r := &rows[i]
			if r.Cached != "kept" {
				t.Errorf("%s: Cached %v after the slots were filled", r.Name, r.Cached)
			}
			v := r.View()
			if r.Name != v.Name || r.UUID != v.UUID || r.LastHeartbeat != v.Agent.LastHeartbeat {
				t.Errorf("light row %s/%s/%v differs from its view %s/%s/%v", r.Name, r.UUID, r.LastHeartbeat, v.Name, v.UUID, v.Agent.LastHeartbeat)
			}
			c := *v
			got = append(got, &c)
		}
		return nil
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("%v, %d rows", err, len(got))
	}
	compare("slots filled")
}
