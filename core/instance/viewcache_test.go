package instance

import (
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
		if err := e.m.ListCachedFunc(bg, ListFilter{Query: "web1"}, func(_ *Instance, ver uint64, cache *ViewCache) error {
			v, c = ver, cache
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
