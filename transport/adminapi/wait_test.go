package adminapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestWait drives GET /1.0/instances/{name}/wait over the real manager.
func TestWait(t *testing.T) {
	store := dbtest.SQLite(t)
	bus := events.New(store)
	t.Cleanup(func() { _ = bus.Close() })
	mgr, err := instance.NewManager(instance.Config{Store: store, Backends: newMemBackends(t), Bus: bus, DefaultBackend: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveManager(t, mgr, bus)
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"m1","start":true}`, 201)
	m1, err := mgr.Get(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, query string
		status      int
		errText     string
		outcome     string
		before      func()
	}{
		{"missing for", "", 400, "missing for: one of ready, agent-connected, running, stopped", "", nil},
		{"bad for", "?for=happy", 400, `invalid for "happy": must be one of ready, agent-connected, running, stopped`, "", nil},
		{"bad timeout", "?for=ready&timeout=soon", 400, `invalid timeout "soon": not a duration such as 30s or 2m`, "", nil},
		{"negative timeout", "?for=ready&timeout=-1s", 400, `invalid timeout "-1s": must be between`, "", nil},
		{"timeout", "?for=ready&timeout=100ms", 200, "", api.WaitTimeout, nil},
		{"running", "?for=running&timeout=1m", 200, "", api.WaitMet, nil},
		{"ready", "?for=ready&timeout=1m", 200, "", api.WaitMet, func() {
			if err := mgr.SetReady(context.Background(), m1.UUID, true, events.Requestor{}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			code, env := call(t, srv, "GET", "/1.0/instances/m1/wait"+tt.query, "")
			if code != tt.status {
				t.Fatalf("status %d (%s), want %d", code, env.Error, tt.status)
			}
			checkEnvelope(t, code, env)
			if tt.errText != "" {
				if !strings.Contains(env.Error, tt.errText) {
					t.Fatalf("error %q, want %q", env.Error, tt.errText)
				}
				return
			}
			var w api.InstanceWait
			if err := json.Unmarshal(env.Metadata, &w); err != nil {
				t.Fatal(err)
			}
			if w.Outcome != tt.outcome || w.Instance != "m1" || len(w.Conditions) != 3 {
				t.Fatalf("answer %+v", w)
			}
		})
	}
	if code, _ := call(t, srv, "GET", "/1.0/instances/nope/wait?for=ready", ""); code != 404 {
		t.Fatalf("unknown instance: %d", code)
	}
}
