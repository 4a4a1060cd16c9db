package devlxd

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestLXDErrorTexts checks the error texts scripts compare against LXD's,
// on the trusted storage routes served by the real dir pool (core/storage
// on SQLite) and on the Ubuntu Pro token route: LXD's status and its
// exact words for an unknown pool, an unknown volume or snapshot, a
// volume created twice, and guest attachment refused.
func TestLXDErrorTexts(t *testing.T) {
	st, err := storage.New(t.TempDir(), dbtest.SQLite(t).(storage.Store), func(context.Context, string, string) ([]string, error) { return nil, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVolume(context.Background(), "default", "theirs", "", "", map[string]string{"size": "1MiB", storage.KeyOwner: "devlxd/other"}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.Tokens = fakeTokens{tokA: {Name: "csi", Instances: []string{"a"}}}
		c.Storage = st
	})
	e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
	a := e.client(uuidA, e.agents["a"])
	send := func(method, path, body string) answer {
		t.Helper()
		req, err := http.NewRequest(method, "https://lxd"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokA)
		resp, err := a.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
	if got := send("POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"mine","type":"custom","config":{"size":"1MiB"}}`); got.status != 200 {
		t.Fatalf("creating mine: %+v", got)
	}
	for _, tt := range []struct {
		name, method, path, body string
		want                     answer
	}{
		{"unknown pool", "GET", "/1.0/storage-pools/fast", "", fail(404, "Storage pool not found")},
		{"volumes of an unknown pool", "GET", "/1.0/storage-pools/fast/volumes?recursion=1", "", fail(404, "Storage pool not found")},
		{"volume in an unknown pool", "GET", "/1.0/storage-pools/fast/volumes/custom/mine", "", fail(404, "Storage pool not found")},
		{"create in an unknown pool", "POST", "/1.0/storage-pools/fast/volumes/custom", `{"name":"x","type":"custom"}`, fail(404, "Storage pool not found")},
		{"unknown volume", "GET", "/1.0/storage-pools/default/volumes/custom/nope", "", fail(404, "Storage volume not found")},
		{"delete an unknown volume", "DELETE", "/1.0/storage-pools/default/volumes/custom/nope", "", fail(404, "Storage volume not found")},
		{"snapshots of an unknown volume", "GET", "/1.0/storage-pools/default/volumes/custom/nope/snapshots?recursion=1", "", fail(404, "Storage volume not found")},
		{"another identity's volume is not shown", "GET", "/1.0/storage-pools/default/volumes/custom/theirs", "", fail(404, "Not Found")},
		{"volume created twice", "POST", "/1.0/storage-pools/default/volumes/custom", `{"name":"mine","type":"custom","config":{"size":"1MiB"}}`, fail(409, "Volume by that name already exists")},
		{"another identity's volume's name", "POST", "/1.0/storage-pools/default/volumes", `{"name":"theirs","type":"custom","config":{"size":"1MiB"}}`, fail(409, "Volume by that name already exists")},
		{"ubuntu pro token", "POST", "/1.0/ubuntu-pro/token", "", fail(403, "Failed getting an Ubuntu Pro guest token: Guest attachment not allowed")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := send(tt.method, tt.path, tt.body); got != tt.want {
				t.Fatalf("%s %s:\n got %d %q %q\nwant %d %q %q", tt.method, tt.path, got.status, got.ctype, got.body, tt.want.status, tt.want.ctype, tt.want.body)
			}
		})
	}
}
