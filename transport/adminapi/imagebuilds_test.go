package adminapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// TestImageBuildsRoutes drives /1.0/images/builds over the real store: a
// build registered (201, its id), reported (stage, counts), listed and
// read, failed (listed with its error), and the precise 400s, 404s and
// 409s of what a client may send wrong.
func TestImageBuildsRoutes(t *testing.T) {
	st, err := images.Open(t.TempDir(), dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	code, env := call(t, srv, "POST", "/1.0/images/builds", `{"name":"debian-12"}`)
	checkEnvelope(t, code, env)
	var b api.ImageBuild
	if err := json.Unmarshal(env.Metadata, &b); err != nil || code != 201 || len(b.ID) != 32 || b.Status != "running" || b.Name != "debian-12" {
		t.Fatalf("register: %d %s: %v", code, env.Metadata, err)
	}
	unknown := strings.Repeat("0", 32)
	steps := []struct {
		name, method, path, body string
		code                     int
		want                     string // in the error, or in the metadata
	}{
		{"stage", "PATCH", "/1.0/images/builds/" + b.ID, `{"stage":"bootstrap","lines":3}`, 200, `"step":1`},
		{"bytes", "PATCH", "/1.0/images/builds/" + b.ID, `{"done":5,"total":10}`, 200, `"done":5,"total":10`},
		{"get", "GET", "/1.0/images/builds/" + b.ID, "", 200, `"stage":"bootstrap"`},
		{"list", "GET", "/1.0/images/builds", "", 200, `"id":"` + b.ID + `"`},
		{"no name", "POST", "/1.0/images/builds", `{}`, 400, `invalid image build: "name", the image's alias, is required`},
		{"bad name", "POST", "/1.0/images/builds", `{"name":"a b"}`, 400, `invalid image alias "a b"`},
		{"unknown field", "POST", "/1.0/images/builds", `{"name":"x","stage":"y"}`, 400, `unknown field "stage"`},
		{"not JSON", "PATCH", "/1.0/images/builds/" + b.ID, `stage`, 400, "invalid"},
		{"bad id", "PATCH", "/1.0/images/builds/xyz", `{"lines":1}`, 400, `invalid build id "xyz": 32 hex digits are expected`},
		{"bad id get", "GET", "/1.0/images/builds/12", "", 400, `invalid build id "12"`},
		{"unknown id", "PATCH", "/1.0/images/builds/" + unknown, `{"lines":1}`, 404, `image build "` + unknown + `"`},
		{"unknown id get", "GET", "/1.0/images/builds/" + unknown, "", 404, "image build " + unknown + " not found"},
		{"negative", "PATCH", "/1.0/images/builds/" + b.ID, `{"done":-1}`, 400, "done is -1, not a count"},
		{"done over total", "PATCH", "/1.0/images/builds/" + b.ID, `{"done":11,"total":10}`, 400, "done 11 is more than total 10"},
		{"bad status", "PATCH", "/1.0/images/builds/" + b.ID, `{"status":"paused"}`, 400, `invalid build status "paused"`},
		{"stage with newline", "PATCH", "/1.0/images/builds/" + b.ID, `{"stage":"a\nb"}`, 400, "a control character at byte 1"},
		{"failed", "PATCH", "/1.0/images/builds/" + b.ID, `{"status":"failed","error":"make: exit status 2"}`, 200, `"status":"failed"`},
		{"listed failed", "GET", "/1.0/images/builds", "", 200, `"error":"make: exit status 2"`},
		{"report after the end", "PATCH", "/1.0/images/builds/" + b.ID, `{"lines":1}`, 409, "has ended (failed: make: exit status 2)"},
		{"not a fingerprint", "GET", "/1.0/images/builds", "", 200, `"name":"debian-12"`},
	}
	for _, s := range steps {
		code, env := call(t, srv, s.method, s.path, s.body)
		checkEnvelope(t, code, env)
		got := env.Error
		if code < 300 {
			got = string(env.Metadata)
		}
		if code != s.code || !strings.Contains(got, s.want) {
			t.Fatalf("%s: %d %s, want %d with %q", s.name, code, got, s.code, s.want)
		}
	}

	// A daemon without an image store has no builds either.
	none := apitest.NewServer(t, apitest.Options{})
	code, env = call(t, none, "POST", "/1.0/images/builds", `{"name":"debian-12"}`)
	if code != 501 || env.Error != "this daemon has no image store" {
		t.Fatalf("without a store: %d %q", code, env.Error)
	}
}
