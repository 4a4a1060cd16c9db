package devlxd

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// observed is one ObserveRequest call.
type observed struct {
	route, method string
	code          int
}

// recordObserver records ObserveRequest calls.
type recordObserver struct {
	mu    sync.Mutex
	calls []observed
}

func (r *recordObserver) ObserveRequest(route, method string, code int, elapsed time.Duration) {
	if elapsed < 0 {
		panic("negative elapsed time")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, observed{route, method, code})
}

func (r *recordObserver) take() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

var _ RequestObserver = (*recordObserver)(nil)

// TestObserverSeesRoutePatterns checks that every answered request reaches
// the observer with its route pattern (never the raw path), its method and
// the status sent, including refusals before routing and unknown paths.
func TestObserverSeesRoutePatterns(t *testing.T) {
	rec := &recordObserver{}
	e := newEnv(t, func(c *Config) { c.Observer = rec })
	tests := []struct {
		name         string
		uuid         string
		noCert       bool
		method, path string
		body         string
		want         observed
	}{
		{"root", uuidA, false, "GET", "/", "", observed{"/", "GET", 200}},
		{"info", uuidA, false, "GET", "/1.0", "", observed{"/1.0", "GET", 200}},
		{"state patch", uuidA, false, "PATCH", "/1.0", `{"state":"Ready"}`, observed{"/1.0", "PATCH", 200}},
		{"bad state patch", uuidA, false, "PATCH", "/1.0", `{"state":`, observed{"/1.0", "PATCH", 400}},
		{"config key is a pattern", uuidA, false, "GET", "/1.0/config/user.foo", "", observed{"/1.0/config/*", "GET", 200}},
		{"missing config key", uuidA, false, "GET", "/1.0/config/user.nope", "", observed{"/1.0/config/*", "GET", 404}},
		{"method not implemented", uuidA, false, "DELETE", "/1.0/devices", "", observed{"/1.0/devices", "DELETE", 501}},
		{"unknown path", uuidA, false, "GET", "/1.0/nope/x", "", observed{RouteNone, "GET", 404}},
		{"no client certificate", uuidA, true, "GET", "/1.0", "", observed{RouteNone, "GET", 401}},
		{"refused at the root", uuidA, true, "GET", "/", "", observed{RouteNone, "GET", 401}},
		{"devlxd disabled (checked per route, after the method, as LXD)", uuidOff, false, "GET", "/1.0", "", observed{"/1.0", "GET", 403}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := e.agents["a"]
			if tt.uuid == uuidOff {
				client = e.agents["off"]
			}
			if tt.noCert {
				client = nil
			}
			got := do(t, e.client(tt.uuid, client), tt.method, tt.path, tt.body)
			calls := rec.take()
			if len(calls) != 1 {
				t.Fatalf("%d observations %v, want 1", len(calls), calls)
			}
			if calls[0] != tt.want {
				t.Fatalf("observed %+v, want %+v", calls[0], tt.want)
			}
			if got.status != tt.want.code {
				t.Fatalf("client saw %d, observer %d", got.status, tt.want.code)
			}
		})
	}
	if calls := rec.take(); !slices.Equal(calls, nil) {
		t.Fatalf("left over observations %v", calls)
	}
}
