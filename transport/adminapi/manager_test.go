package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sdk/sdktest"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// memBackends is a backend source with one backend, "mem": the SDK's mock
// backend (in-memory guests) served in-process over gRPC. It stands in for
// a plugin so the API can be tested over the real instance manager.
type memBackends struct{ be sdk.Backend }

func newMemBackends(t testing.TB) memBackends {
	mock := &sdktest.Backend{
		InfoFunc: func(context.Context) (*sdk.Info, error) {
			return &sdk.Info{Name: "mem", Version: "1", ConfigPrefixes: []string{"mem."}}, nil
		},
	}
	return memBackends{be: sdktest.Serve(t, mock)}
}

func (s memBackends) Backend(name string) (sdk.Backend, error) {
	if name != "mem" {
		return nil, fmt.Errorf("backend %q: %w", name, errdefs.ErrNotFound)
	}
	return s.be, nil
}

// serveManager serves the admin API over mgr and bus (with the default
// test backends) on a Unix socket in a temporary directory, shut down when
// the test ends.
func serveManager(t *testing.T, mgr *instance.Manager, bus *events.Bus) *apitest.Server {
	t.Helper()
	backends := &apitest.Backends{}
	backends.Set(apitest.DefaultBackends()...)
	a := adminapi.New(adminapi.Config{Instances: mgr, Events: bus, Backends: backends})
	dir := t.TempDir()
	sock := filepath.Join(dir, "guestlink.sock")
	ln, err := adminapi.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return &apitest.Server{Socket: sock, Dir: dir}
}

// TestRealManager drives the real instance manager (SQLite store, real bus)
// through the API: the statuses of its errors and the instance object.
func TestRealManager(t *testing.T) {
	store := dbtest.SQLite(t)
	bus := events.New(store)
	t.Cleanup(func() { _ = bus.Close() })
	mgr, err := instance.NewManager(instance.Config{Store: store, Backends: newMemBackends(t), Bus: bus, DefaultBackend: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveManager(t, mgr, bus)

	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"m1","config":{"user.a":"1"}}`, 201)
	steps := []struct {
		name         string
		method, path string
		body         string
		code         int
		contains     string
	}{
		{"duplicate", "POST", "/1.0/instances", `{"name":"m1"}`, 409, `"m1"`},
		{"unknown key", "POST", "/1.0/instances", `{"name":"m2","config":{"bogus":"1"}}`, 400, "bogus"},
		{"stop stopped", "PUT", "/1.0/instances/m1/state", `{"action":"stop"}`, 409, `"m1"`},
		{"start", "PUT", "/1.0/instances/m1/state", `{"action":"start"}`, 200, ""},
		{"start running", "PUT", "/1.0/instances/m1/state", `{"action":"start"}`, 409, `"m1"`},
		{"delete running", "DELETE", "/1.0/instances/m1", "", 409, `"m1"`},
		{"patch unknown key", "PATCH", "/1.0/instances/m1", `{"config":{"bogus":"1"}}`, 400, "bogus"},
		{"patch", "PATCH", "/1.0/instances/m1", `{"config":{"user.b":"2"},"unset":["user.a"]}`, 200, ""},
		{"unknown", "GET", "/1.0/instances/nope", "", 404, `"nope"`},
		{"unknown timeline", "GET", "/1.0/instances/nope/timeline", "", 404, `"nope"`},
		{"bad status", "GET", "/1.0/instances?status=Asleep", "", 400, "Asleep"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, env := call(t, srv, st.method, st.path, st.body)
			t.Logf("%d %s", code, env.Error)
			if code != st.code || !strings.Contains(env.Error, st.contains) {
				t.Fatalf("got %d %q, want %d containing %q", code, env.Error, st.code, st.contains)
			}
			checkEnvelope(t, code, env)
		})
	}

	var inst api.Instance
	if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances/m1", "", 200).Metadata, &inst); err != nil {
		t.Fatal(err)
	}
	if inst.Status != "Running" || inst.Backend != "mem" || inst.Boot != 1 || inst.Config["user.b"] != "2" ||
		inst.Config["user.a"] != "" || len(inst.Timeline) == 0 {
		t.Fatalf("instance = %+v", inst)
	}
	want := map[string]bool{"user.b": true}
	got := maps.Clone(inst.Config)
	for k := range got {
		if strings.HasPrefix(k, "volatile.") {
			delete(got, k)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("config = %v", inst.Config)
	}
	var list []api.Instance
	if err := json.Unmarshal(mustCall(t, srv, "GET", "/1.0/instances?recursion=1&status=running", "", 200).Metadata, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("running list = %+v", list)
	}
	// The list the manager's shared views are encoded into is what
	// encoding/json makes of List's copies, byte for byte.
	mustCall(t, srv, "POST", "/1.0/instances", `{"name":"m0","config":{"user.x":"<&>\u2028"},"devices":{"d":{"type":"nic","nictype":"user"}}}`, 201)
	for q, f := range map[string]instance.ListFilter{"?recursion=1": {}, "?recursion=1&status=running": {Status: "running"}, "?recursion=2&q=m0": {Query: "m0"}} {
		views, err := mgr.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		// The API object of each view (its JSON is the old shape:
		// TestWireInstanceMatchesServiceJSON).
		want := make([]api.Instance, 0, len(views))
		for _, v := range views {
			want = append(want, instance.WireInstance(v, nil))
		}
		wantJSON, _ := json.Marshal(want)
		if got := mustCall(t, srv, "GET", "/1.0/instances"+q, "", 200).Metadata; string(got) != string(wantJSON) {
			t.Fatalf("GET /1.0/instances%s =\n%s\nwant\n%s", q, got, wantJSON)
		}
	}
	mustCall(t, srv, "PUT", "/1.0/instances/m1/state", `{"action":"restart"}`, http.StatusOK)
	mustCall(t, srv, "DELETE", "/1.0/instances/m1?force=true", "", http.StatusOK)
	mustCall(t, srv, "GET", "/1.0/instances/m1", "", http.StatusNotFound)
}
