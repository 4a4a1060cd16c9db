package adminapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// TestImagesRoutes drives /1.0/images over a real store (SQLite, files in
// a state directory): import, list, get by prefix, aliases, delete, and the
// precise errors of bad requests.
func TestImagesRoutes(t *testing.T) {
	dir := t.TempDir()
	st, err := images.Open(dir, dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	disk := filepath.Join(dir, "disk.img")
	data := imagetest.Ext(1 << 20) // a raw ext image of 1 MiB
	if err := os.WriteFile(disk, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	fp := hex.EncodeToString(sum[:])

	steps := []struct {
		name, method, path, body string
		code                     int
		want                     string // in the error, or in the metadata
	}{
		{"import", "POST", "/1.0/images", fmt.Sprintf(`{"path":%q,"alias":"zeros","properties":{"os":"none"}}`, disk), 201, fp},
		{"import again", "POST", "/1.0/images", fmt.Sprintf(`{"path":%q}`, disk), 409, "an image with fingerprint " + fp + " exists"},
		{"relative path", "POST", "/1.0/images", `{"path":"disk.img"}`, 400, `invalid path "disk.img": an absolute path`},
		{"relative kernel", "POST", "/1.0/images", fmt.Sprintf(`{"path":%q,"kernel":"vmlinuz"}`, disk), 400, `invalid kernel "vmlinuz"`},
		{"bad alias", "POST", "/1.0/images", fmt.Sprintf(`{"path":%q,"alias":"a b"}`, disk), 400, `invalid image alias "a b"`},
		{"unknown field", "POST", "/1.0/images", `{"path":"/x","source":{}}`, 400, `unknown field "source"`},
		{"missing file", "POST", "/1.0/images", `{"path":"/nonexistent/x.img"}`, 404, "no such file"},
		{"list", "GET", "/1.0/images", "", 200, `"name":"zeros"`},
		{"no import in progress", "GET", "/1.0/images/imports", "", 200, `[]`},
		{"get by prefix", "GET", "/1.0/images/" + fp[:12], "", 200, `"os":"none"`},
		{"private after import", "GET", "/1.0/images/" + fp, "", 200, `"public":false`},
		{"make public", "PATCH", "/1.0/images/" + fp[:12], `{"public":true}`, 200, `"public":true`},
		{"public kept", "GET", "/1.0/images/" + fp, "", 200, `"public":true`},
		{"make private", "PATCH", "/1.0/images/" + fp, `{"public":false}`, 200, `"public":false`},
		{"patch nothing", "PATCH", "/1.0/images/" + fp, `{}`, 400, `nothing to change (only "public" can change)`},
		{"patch another field", "PATCH", "/1.0/images/" + fp, `{"filename":"x"}`, 400, `unknown field "filename"`},
		{"patch unknown", "PATCH", "/1.0/images/ffffffffffff", `{"public":true}`, 404, `image "ffffffffffff"`},
		{"get unknown", "GET", "/1.0/images/ffffffffffff", "", 404, `image "ffffffffffff": no image has this alias or fingerprint`},
		{"alias", "POST", "/1.0/images/aliases", `{"name":"stable","target":"zeros","description":"d"}`, 201, fp},
		{"alias taken", "POST", "/1.0/images/aliases", `{"name":"stable","target":"zeros"}`, 409, "already exists"},
		{"alias without target", "POST", "/1.0/images/aliases", `{"name":"x"}`, 400, "a target image is required"},
		{"alias of nothing", "POST", "/1.0/images/aliases", `{"name":"x","target":"nope"}`, 404, `image "nope"`},
		{"get alias", "GET", "/1.0/images/aliases/stable", "", 200, `"target":"` + fp},
		{"list aliases", "GET", "/1.0/images/aliases", "", 200, `"name":"stable"`},
		{"delete alias", "DELETE", "/1.0/images/aliases/stable", "", 200, "{}"},
		{"get deleted alias", "GET", "/1.0/images/aliases/stable", "", 404, "image alias stable not found"},
		{"delete", "DELETE", "/1.0/images/" + fp, "", 200, "{}"},
		{"delete again", "DELETE", "/1.0/images/" + fp, "", 404, "not found"},
		{"alias gone with its image", "GET", "/1.0/images/aliases/zeros", "", 404, "not found"},
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
		if s.name == "list" {
			var list []api.Image
			if err := json.Unmarshal(env.Metadata, &list); err != nil || len(list) != 1 || list[0].Size != 1<<20 || list[0].Format != "raw" {
				t.Fatalf("list = %+v, %v", list, err)
			}
		}
	}
	if entries, _ := os.ReadDir(images.Dir(dir)); len(entries) != 0 {
		t.Fatalf("the store directory holds %d files after the delete", len(entries))
	}
}

// importingStore is the real store with one import shown in progress:
// core/images' TestImportsInProgress tracks real copies; this checks the
// route and the wire form.
type importingStore struct{ *images.Store }

func (importingStore) Imports() []images.ImportProgress {
	return []images.ImportProgress{{Path: "/srv/x.img", Done: 3 << 20, Total: 7 << 20, Started: time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)}}
}

// TestImageImportsRoute: GET /1.0/images/imports answers the store's
// imports in progress with their name (the file's, without an alias),
// path, bytes copied and to copy, and start.
func TestImageImportsRoute(t *testing.T) {
	st, err := images.Open(t.TempDir(), dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: importingStore{st}})
	code, env := call(t, srv, "GET", "/1.0/images/imports", "")
	checkEnvelope(t, code, env)
	var list []api.ImageImport
	if err := json.Unmarshal(env.Metadata, &list); err != nil || code != 200 {
		t.Fatalf("%d %s: %v", code, env.Metadata, err)
	}
	want := api.ImageImport{Name: "x.img", Path: "/srv/x.img", Done: 3 << 20, Total: 7 << 20, StartedAt: time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)}
	if len(list) != 1 || list[0] != want {
		t.Fatalf("imports = %+v, want [%+v]", list, want)
	}
}

// TestImagesWithoutStore: a daemon without an image store answers 501.
func TestImagesWithoutStore(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	code, env := call(t, srv, "GET", "/1.0/images", "")
	checkEnvelope(t, code, env)
	if code != 501 || env.Error != "this daemon has no image store" {
		t.Fatalf("%d %q", code, env.Error)
	}
}
