package devlxd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db/dbtest"
)

// volumeEnv is a devlxd server with the real storage service (a dir pool
// of sparse files in a temporary directory, records in SQLite), instance
// a managing volumes and two identities: csi (tokA) and other (tokAB).
func volumeEnv(t *testing.T) (*env, *storage.Service, *http.Client) {
	t.Helper()
	st, err := storage.New(t.TempDir(), dbtest.SQLite(t).(storage.Store), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.Tokens = fakeTokens{
			tokA:  {Name: "csi", Instances: []string{"a"}},
			tokAB: {Name: "other", Instances: []string{"a"}},
		}
		c.Storage = st
		c.InstanceTypes = fixedType("container")
	})
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	return e, st, e.client(uuidA, e.agents["a"])
}

// reply is one answer with its ETag.
type tagged struct {
	answer
	etag string
}

// call sends method path with body, the bearer token and the headers
// (name, value pairs).
func call(t *testing.T, c *http.Client, token, method, path, body string, headers ...string) tagged {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "https://lxd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return tagged{answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}, resp.Header.Get("ETag")}
}

// succeeded checks that a answered 200 with a finished, successful
// operation.
func succeeded(t *testing.T, what string, a tagged) {
	t.Helper()
	var env struct {
		Metadata Operation `json:"metadata"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &env) != nil || env.Metadata.Status != "Success" || env.Metadata.StatusCode != 200 || env.Metadata.ID == "" {
		t.Fatalf("%s: %d %s, want a successful operation", what, a.status, a.body)
	}
}

// lxdETag is LXD's ETag of the JSON text of its field list (written out by
// the test, as LXD's encoder writes it): SHA-256 of it and a newline, hex,
// quoted.
func lxdETag(fieldsJSON string) string {
	sum := sha256.Sum256([]byte(fieldsJSON + "\n"))
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func TestVolumeETagIfMatch(t *testing.T) {
	_, st, a := volumeEnv(t)
	const vol = "/1.0/storage-pools/default/volumes/custom/v1"
	succeeded(t, "create", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes", `{"name":"v1","description":"first","config":{"size":"1MiB"}}`))

	got := call(t, a, tokA, "GET", vol, "")
	wantTag := lxdETag(`["v1","custom",{"size":"1MiB","volatile.devlxd.owner":"devlxd/csi"}]`)
	want := sync200(`{"name":"v1","description":"first","pool":"default","type":"custom","content_type":"block","config":{"size":"1MiB","volatile.devlxd.owner":"devlxd/csi"},"location":"none"}`)
	if got.answer != want || got.etag != wantTag {
		t.Fatalf("GET volume: %+v ETag %s\nwant %+v ETag %s", got.answer, got.etag, want, wantTag)
	}

	// A stale tag (what the volume's was before a change by someone
	// else) is refused with LXD's 412 and changes nothing.
	stale := lxdETag(`["v1","custom",{"size":"512KiB","volatile.devlxd.owner":"devlxd/csi"}]`)
	for _, method := range []string{"PUT", "PATCH"} {
		got = call(t, a, tokA, method, vol, `{"description":"second","config":{"size":"2MiB"}}`, "If-Match", stale)
		hash, match := strings.Trim(wantTag, `"`), strings.Trim(stale, `"`)
		want = fail(412, "ETag does not match: "+hash+" vs "+match+". The configuration has been modified since this change began. Please retrieve the updated configuration before proceeding.")
		if got.answer != want {
			t.Fatalf("%s with a stale If-Match: %+v, want %+v", method, got.answer, want)
		}
	}
	v, err := st.Volume(context.Background(), "default", "v1")
	if err != nil || v.Description != "first" || v.Config["size"] != "1MiB" {
		t.Fatalf("after the refused updates: %+v %v, want it unchanged", v, err)
	}
	// An If-Match of "" (quotes only) is not the tag either, as LXD.
	if got = call(t, a, tokA, "PUT", vol, `{"description":"x"}`, "If-Match", `""`); got.status != 412 {
		t.Fatalf(`If-Match "": %+v, want 412`, got.answer)
	}

	// The current tag, quoted or not, lets the change through; the tag
	// then follows the new config.
	succeeded(t, "PUT with the current tag", call(t, a, tokA, "PUT", vol, `{"description":"second","config":{"size":"2MiB"}}`, "If-Match", wantTag))
	succeeded(t, "PATCH without quotes", call(t, a, tokA, "PATCH", vol, `{"description":"third"}`, "If-Match", strings.Trim(lxdETag(`["v1","custom",{"size":"2MiB","volatile.devlxd.owner":"devlxd/csi"}]`), `"`)))
	if got = call(t, a, tokA, "GET", vol, ""); got.etag != lxdETag(`["v1","custom",{"size":"2MiB","volatile.devlxd.owner":"devlxd/csi"}]`) || !strings.Contains(got.body, `"description":"third"`) {
		t.Fatalf("after the updates: %+v ETag %s", got.answer, got.etag)
	}
	// Without If-Match an update is not checked (LXD).
	succeeded(t, "PUT without If-Match", call(t, a, tokA, "PUT", vol, `{"description":"fourth"}`))

	// The pool's and a snapshot's ETags: LXD's fields.
	p, _ := st.GetPool("default")
	src, _ := json.Marshal(p.Source)
	if got = call(t, a, tokA, "GET", "/1.0/storage-pools/default", ""); got.answer != sync200(`{"name":"default","driver":"dir","status":"Created"}`) ||
		got.etag != lxdETag(`["default","dir","Directory pool of raw block volumes",{"source":`+string(src)+`}]`) {
		t.Fatalf("GET pool: %+v ETag %s", got.answer, got.etag)
	}
	succeeded(t, "snapshot", call(t, a, tokA, "POST", vol+"/snapshots", `{"name":"s","description":"snap desc"}`))
	if got = call(t, a, tokA, "GET", vol+"/snapshots/s", ""); got.etag != lxdETag(`["snap desc","0001-01-01T00:00:00Z"]`) {
		t.Fatalf("GET snapshot: %+v ETag %s", got.answer, got.etag)
	}
	// Lists carry no ETag (LXD).
	for _, path := range []string{"/1.0/storage-pools/default/volumes?recursion=1", vol + "/snapshots?recursion=1"} {
		if got = call(t, a, tokA, "GET", path, ""); got.status != 200 || got.etag != "" {
			t.Fatalf("GET %s: %+v ETag %q, want 200 without one", path, got.answer, got.etag)
		}
	}
}

func TestVolumeSnapshotNames(t *testing.T) {
	_, _, a := volumeEnv(t)
	const vol = "/1.0/storage-pools/default/volumes/custom/v1"
	succeeded(t, "create", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"v1","type":"custom","config":{"size":"1MiB"}}`))
	// Tried: an empty body object twice, a named one, then empty again:
	// LXD's snap%d counts from the highest snapN.
	succeeded(t, "first {}", call(t, a, tokA, "POST", vol+"/snapshots", `{}`))
	succeeded(t, "second {}", call(t, a, tokA, "POST", vol+"/snapshots", `{}`))
	succeeded(t, "snap7", call(t, a, tokA, "POST", vol+"/snapshots", `{"name":"snap7"}`))
	succeeded(t, "named", call(t, a, tokA, "POST", vol+"/snapshots", `{"name":"before-upgrade"}`))
	succeeded(t, "third {}", call(t, a, tokA, "POST", vol+"/snapshots", `{}`))
	got := call(t, a, tokA, "GET", vol+"/snapshots?recursion=1", "")
	var env struct {
		Metadata []wireSnapshot `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(got.body), &env); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range env.Metadata {
		names[s.Name] = true
	}
	for _, n := range []string{"snap0", "snap1", "snap7", "before-upgrade", "snap8"} {
		if !names[n] {
			t.Errorf("snapshot %s missing from %s", n, got.body)
		}
	}
	if len(names) != 5 {
		t.Errorf("snapshots %v, want 5", names)
	}
	// A name taken: a failed operation, as LXD's conflict inside it.
	got = call(t, a, tokA, "POST", vol+"/snapshots", `{"name":"snap0"}`)
	if got.status != 200 || !strings.Contains(got.body, `"status":"Failure"`) {
		t.Fatalf("snapshot name taken: %+v", got.answer)
	}
}

func TestVolumeCopy(t *testing.T) {
	_, st, a := volumeEnv(t)
	ctx := context.Background()
	succeeded(t, "create", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes", `{"name":"src","config":{"size":"4MiB"}}`))
	write := func(name string, at int64, b []byte) {
		t.Helper()
		f, err := os.OpenFile(st.Path("default", name), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(st.Path("default", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write("src", 0, []byte("first version"))
	write("src", 3<<20, []byte("tail"))
	succeeded(t, "snapshot", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes/custom/src/snapshots", `{}`))
	atSnap := read("src")
	write("src", 0, []byte("second version"))

	succeeded(t, "copy of the volume", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes/custom",
		`{"name":"fromvol","type":"custom","source":{"type":"copy","name":"src","pool":"default"}}`))
	succeeded(t, "copy of the snapshot", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes",
		`{"name":"fromsnap","source":{"type":"copy","name":"src/snap0","pool":"default"},"config":{"volatile.devlxd.owner":"devlxd/someone"}}`))
	if !bytes.Equal(read("fromvol"), read("src")) {
		t.Error("the copy of the volume differs from it")
	}
	if !bytes.Equal(read("fromsnap"), atSnap) || bytes.Equal(atSnap, read("src")) {
		t.Error("the copy of the snapshot is not the snapshot's bytes")
	}
	for _, name := range []string{"fromvol", "fromsnap"} {
		v, err := st.Volume(ctx, "default", name)
		if err != nil || v.Config[storage.KeyOwner] != auth.TypeDevlxd+"/csi" || v.Config["size"] != "4MiB" {
			t.Errorf("copy %s: %+v %v, want owned by devlxd/csi, 4MiB", name, v, err)
		}
	}

	// The identity other owns none of these: its copy of them is LXD's
	// 404, the same as for a volume that does not exist.
	succeeded(t, "other's volume", call(t, a, tokAB, "POST", "/1.0/storage-pools/default/volumes", `{"name":"theirs","config":{"size":"1MiB"}}`))
	for _, tt := range []struct {
		name, token, body string
		want              answer
	}{
		{"another identity's volume", tokAB, `{"name":"x","source":{"type":"copy","name":"src","pool":"default"}}`, fail(404, "Source volume not found")},
		{"another identity's snapshot", tokAB, `{"name":"x","source":{"type":"copy","name":"src/snap0","pool":"default"}}`, fail(404, "Source volume not found")},
		{"a volume that does not exist", tokA, `{"name":"x","source":{"type":"copy","name":"nope","pool":"default"}}`, fail(404, "Source volume not found")},
		{"a snapshot that does not exist", tokA, `{"name":"x","source":{"type":"copy","name":"src/nope","pool":"default"}}`, fail(404, "Source volume not found")},
		{"no source pool", tokA, `{"name":"x","source":{"type":"copy","name":"src"}}`, fail(404, "Source volume not found")},
		{"a type other than copy", tokA, `{"name":"x","source":{"type":"migration","name":"src","pool":"default"}}`, fail(400, `Invalid source type "migration": Only source type "copy" is supported`)},
		{"no source name", tokA, `{"name":"x","source":{"type":"copy","name":"/snap0","pool":"default"}}`, fail(400, "Source volume name must be provided when source is configured")},
		{"a taken name", tokA, `{"name":"fromvol","source":{"type":"copy","name":"src","pool":"default"}}`, fail(409, "Volume by that name already exists")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := call(t, a, tt.token, "POST", "/1.0/storage-pools/default/volumes", tt.body); got.answer != tt.want {
				t.Fatalf("%s: %+v, want %+v", tt.body, got.answer, tt.want)
			}
		})
	}
	if _, err := st.Volume(ctx, "default", "x"); err == nil {
		t.Error("a refused copy made volume x")
	}
	// Another identity's volume is not revealed on its own routes either.
	for _, m := range []string{"GET", "PUT", "PATCH", "DELETE"} {
		if got := call(t, a, tokAB, m, "/1.0/storage-pools/default/volumes/custom/src", `{}`); got.answer != fail(404, "Not Found") {
			t.Errorf("%s another identity's volume: %+v, want 404 Not Found", m, got.answer)
		}
	}
	if got := call(t, a, tokAB, "GET", "/1.0/storage-pools/default/volumes?recursion=1", ""); strings.Contains(got.body, `"src"`) {
		t.Errorf("another identity lists src: %s", got.body)
	}
}

func TestSupportedStorageDrivers(t *testing.T) {
	e, _, a := volumeEnv(t)
	b := e.client(uuidB, e.agents["b"])
	for _, tt := range []struct {
		name   string
		c      *http.Client
		tokens []string
		want   string
	}{
		{"managing volumes", a, []string{"", tokA}, `"supported_storage_drivers":[{"name":"dir","remote":false}]`},
		{"not managing volumes", b, []string{""}, `"supported_storage_drivers":[]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, token := range tt.tokens {
				got := doBearer(t, tt.c, "GET", "/1.0", token)
				if got.status != 200 || !strings.Contains(got.body, tt.want) {
					t.Errorf("GET /1.0 (token %q): %+v, want %s", token, got, tt.want)
				}
			}
		})
	}
}

func TestInstanceETagIfMatch(t *testing.T) {
	e, _, a := volumeEnv(t)
	devs := &fakeDevices{insts: e.insts, uuid: uuidA}
	e.srv.cfg.Devices = devs
	// The instance's tag: the SHA-256 of the JSON of [config, devices] as
	// the test reads them from the instance, newline-ended, quoted.
	tagNow := func() string {
		t.Helper()
		inst, err := e.insts.Get(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		e.insts.mu.Lock()
		b, err := json.Marshal([]any{inst.Config, inst.Devices})
		e.insts.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		return lxdETag(string(b))
	}
	got := call(t, a, tokA, "GET", "/1.0/instances/a", "")
	if want := tagNow(); got.status != 200 || got.etag != want {
		t.Fatalf("GET instance: %+v ETag %s, want %s", got.answer, got.etag, want)
	}
	stale := got.etag
	succeeded(t, "a volume", call(t, a, tokA, "POST", "/1.0/storage-pools/default/volumes", `{"name":"d1","config":{"size":"1MiB"}}`))
	const attach = `{"devices":{"d1":{"type":"disk","pool":"default","source":"d1"}}}`
	// The instance changes (a user key), so the tag read before is stale:
	// 412 and no device change, even one that would change nothing.
	e.insts.setConfig(uuidA, "user.changed", "yes")
	for _, body := range []string{attach, `{"devices":{}}`} {
		got = call(t, a, tokA, "PATCH", "/1.0/instances/a", body, "If-Match", stale)
		if got.status != 412 || !strings.Contains(got.body, "ETag does not match: "+strings.Trim(tagNow(), `"`)+" vs "+strings.Trim(stale, `"`)) {
			t.Fatalf("PATCH %s with a stale If-Match: %+v", body, got.answer)
		}
	}
	devs.mu.Lock()
	n := len(devs.got)
	devs.mu.Unlock()
	if n != 0 {
		t.Fatalf("a refused PATCH changed devices: %+v", devs.got)
	}
	// The current tag lets it through.
	if got = call(t, a, tokA, "PATCH", "/1.0/instances/a", attach, "If-Match", tagNow()); got.answer != sync200("null") {
		t.Fatalf("PATCH with the current If-Match: %+v", got.answer)
	}
	devs.mu.Lock()
	defer devs.mu.Unlock()
	if len(devs.got) != 1 || devs.got[0].Put["d1"]["source"] != "d1" {
		t.Fatalf("device updates %+v, want d1 attached", devs.got)
	}
}
