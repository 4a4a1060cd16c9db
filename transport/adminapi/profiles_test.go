package adminapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// realManagerServer serves the API over the real instance manager (SQLite
// store, the SDK's mock backend "mem" over gRPC) on a Unix socket.
func realManagerServer(t *testing.T) *apitest.Server {
	t.Helper()
	store := dbtest.SQLite(t)
	bus := events.New(store)
	t.Cleanup(func() { _ = bus.Close() })
	mgr, err := instance.NewManager(instance.Config{Store: store, Backends: newMemBackends(t), Bus: bus, DefaultBackend: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return serveManager(t, mgr, bus)
}

// TestProfileRoutes drives LXD's profile routes over the real manager:
// each step's status and message, then what the profiles and instances
// hold.
func TestProfileRoutes(t *testing.T) {
	srv := realManagerServer(t)
	steps := []struct {
		name         string
		method, path string
		body         string
		code         int
		contains     string
	}{
		{"default exists", "GET", "/1.0/profiles/default", "", 200, `"eth0"`},
		{"create", "POST", "/1.0/profiles", `{"name":"web","description":"web tier","config":{"user.tier":"web"},"devices":{"eth1":{"type":"nic","nictype":"user","hostfwd":"tcp::8080-:80"}}}`, 201, `"web"`},
		{"create taken", "POST", "/1.0/profiles", `{"name":"web"}`, 409, `"web"`},
		{"create bad name", "POST", "/1.0/profiles", `{"name":"a b"}`, 400, `invalid profile name "a b"`},
		{"create bad key", "POST", "/1.0/profiles", `{"name":"x","config":{"bogus":"1"}}`, 400, `unknown configuration key "bogus"`},
		{"create bad device", "POST", "/1.0/profiles", `{"name":"x","devices":{"eth0":{"type":"nic","nictype":"wifi"}}}`, 400, `unknown nictype "wifi"`},
		{"create unknown field", "POST", "/1.0/profiles", `{"name":"x","colour":"red"}`, 400, "colour"},
		{"get unknown", "GET", "/1.0/profiles/nope", "", 404, `"nope"`},
		{"launch with profiles", "POST", "/1.0/instances", `{"name":"i1","profiles":["default","web"],"config":{"user.tier":"own"}}`, 201, `"profiles":["default","web"]`},
		{"launch default", "POST", "/1.0/instances", `{"name":"i2"}`, 201, `"profiles":["default"]`},
		{"launch none", "POST", "/1.0/instances", `{"name":"i3","profiles":[]}`, 201, `"profiles":[]`},
		{"launch unknown profile", "POST", "/1.0/instances", `{"name":"i4","profiles":["nope"]}`, 404, `profile "nope"`},
		{"used by", "GET", "/1.0/profiles/web", "", 200, `"used_by":["/1.0/instances/i1"]`},
		{"delete in use", "DELETE", "/1.0/profiles/web", "", 409, "used by instances i1"},
		{"delete default", "DELETE", "/1.0/profiles/default", "", 403, `the "default" profile cannot be deleted`},
		{"rename default", "POST", "/1.0/profiles/default", `{"name":"other"}`, 403, `the "default" profile cannot be renamed`},
		{"rename onto taken", "POST", "/1.0/profiles/web", `{"name":"default"}`, 409, `"web"`},
		{"rename without name", "POST", "/1.0/profiles/web", `{}`, 400, "no new name"},
		{"patch", "PATCH", "/1.0/profiles/web", `{"config":{"user.extra":"1","user.tier":""}}`, 200, `"user.extra":"1"`},
		{"patch nothing", "PATCH", "/1.0/profiles/web", `{}`, 400, "nothing to change"},
		{"put", "PUT", "/1.0/profiles/web", `{"description":"replaced","config":{"user.tier":"web2"},"devices":{}}`, 200, `"replaced"`},
		{"put unknown", "PUT", "/1.0/profiles/nope", `{"config":{}}`, 404, `"nope"`},
		{"rename", "POST", "/1.0/profiles/web", `{"name":"site"}`, 201, ""},
		{"instance follows rename", "GET", "/1.0/instances/i1", "", 200, `"profiles":["default","site"]`},
		{"assign unknown", "PATCH", "/1.0/instances/i1", `{"profiles":["nope"]}`, 404, `profile "nope"`},
		{"assign with config", "PATCH", "/1.0/instances/i1", `{"profiles":["default"],"config":{"user.a":"1"}}`, 400, "profiles are changed alone"},
		{"assign", "PATCH", "/1.0/instances/i1", `{"profiles":["default"]}`, 200, `"profiles":["default"]`},
		{"delete", "DELETE", "/1.0/profiles/site", "", 200, ""},
		{"deleted", "GET", "/1.0/profiles/site", "", 404, `"site"`},
		{"list", "GET", "/1.0/profiles", "", 200, `["/1.0/profiles/default"]`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, env := call(t, srv, st.method, st.path, st.body)
			if code != st.code {
				t.Fatalf("%s %s %s: status %d (%s), want %d", st.method, st.path, st.body, code, env.Error, st.code)
			}
			checkEnvelope(t, code, env)
			got := env.Error + string(env.Metadata)
			if !strings.Contains(got, st.contains) {
				t.Fatalf("%s %s: %s, want it to contain %s", st.method, st.path, got, st.contains)
			}
		})
	}
	env := mustCall(t, srv, "GET", "/1.0/profiles?recursion=1", "", 200)
	var list []api.Profile
	if err := json.Unmarshal(env.Metadata, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "default" || list[0].Devices["root"]["path"] != "/" || list[0].Devices["eth0"]["nictype"] != "user" {
		t.Fatalf("profiles = %+v", list)
	}
	if got := strings.Join(list[0].UsedBy, ","); got != "/1.0/instances/i1,/1.0/instances/i2" {
		t.Fatalf("default used by %s", got)
	}
}

// TestProfileETag: a PUT with the If-Match of the version read succeeds;
// once the profile changed, the same If-Match is 412 and changes nothing.
func TestProfileETag(t *testing.T) {
	srv := realManagerServer(t)
	mustCall(t, srv, "POST", "/1.0/profiles", `{"name":"p","config":{"user.a":"1"}}`, 201)
	do := func(method, body, ifMatch string) *http.Response {
		t.Helper()
		var r *strings.Reader
		if body != "" {
			r = strings.NewReader(body)
		} else {
			r = strings.NewReader("")
		}
		req, err := http.NewRequestWithContext(context.Background(), method, "http://guestlink/1.0/profiles/p", r)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := httpClient(srv).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	etag := do("GET", "", "").Header.Get("ETag")
	if etag == "" {
		t.Fatal("GET /1.0/profiles/p has no ETag")
	}
	if resp := do("PUT", `{"config":{"user.a":"2"}}`, etag); resp.StatusCode != 200 {
		t.Fatalf("PUT with the current ETag: %d", resp.StatusCode)
	}
	if resp := do("PUT", `{"config":{"user.a":"3"}}`, etag); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("PUT with a stale ETag: %d, want 412", resp.StatusCode)
	}
	env := mustCall(t, srv, "GET", "/1.0/profiles/p", "", 200)
	if !strings.Contains(string(env.Metadata), `"user.a":"2"`) {
		t.Fatalf("a refused PUT changed the profile: %s", env.Metadata)
	}
}
