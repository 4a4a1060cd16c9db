package devlxd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestImageExportPublicOnly checks LXD's rule on the real image store: with
// security.devlxd.images=true a guest downloads a public image and gets
// 404 Not Found (in the main API's envelope, as LXD) for a private one —
// an image imported without --public, and one made private again.
func TestImageExportPublicOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := images.Open(dir, dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "disk.img")
	content := imagetest.Ext(1 << 20) // a raw ext4 image, as the store takes
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	im, err := st.Import(ctx, src, images.ImportOptions{Alias: "d"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Images = st })
	e.insts.setConfig(uuidA, "security.devlxd.images", "true")
	a := e.client(uuidA, e.agents["a"])
	export := func() answer {
		t.Helper()
		resp, err := a.Get("https://lxd/1.0/images/" + im.Fingerprint + "/export")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
	for _, step := range []struct {
		name   string
		public *bool
		want   answer
	}{
		{"private after import", nil, fail(404, "Not Found")},
		{"public", ptr(true), answer{200, "application/octet-stream", string(content)}},
		{"private again", ptr(false), fail(404, "Not Found")},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.public != nil {
				if _, err := st.SetPublic(ctx, "d", *step.public); err != nil {
					t.Fatal(err)
				}
			}
			if got := export(); got != step.want {
				t.Fatalf("export:\n got %+v\nwant %+v", got, step.want)
			}
		})
	}
}
