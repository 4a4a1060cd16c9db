package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	wire "github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/api/apitest"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// TestImageCommands runs guestlink image import, list, info, alias and
// delete against a real store, and launch's two argument forms.
func TestImageCommands(t *testing.T) {
	dir := t.TempDir()
	st, err := images.Open(dir, dbtest.SQLite(t).(db.ImageStore), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	disk := filepath.Join(dir, "zeros.img")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	const fp = "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58"

	if out := ok(t, srv, "image", "import", disk, "--alias", "zeros", "-p", "os=none"); out != "Image imported with fingerprint: "+fp+"\n" {
		t.Fatalf("import said %q", out)
	}
	fails(t, srv, "importing image "+disk+": an image with fingerprint "+fp+" exists: already exists", "image", "import", disk)
	fails(t, srv, `invalid property "x": want key=value`, "image", "import", disk, "-p", "x")
	if out := ok(t, srv, "image", "list"); !strings.Contains(out, "zeros") || !strings.Contains(out, fp[:12]) || !strings.Contains(out, "1.0MiB") {
		t.Fatalf("list:\n%s", out)
	}
	for _, ref := range []string{"zeros", fp, fp[:10]} {
		var im wire.Image
		if err := json.Unmarshal([]byte(ok(t, srv, "image", "info", ref, "--format", "json")), &im); err != nil || im.Fingerprint != fp || im.Properties["os"] != "none" {
			t.Fatalf("info %s = %+v, %v", ref, im, err)
		}
	}
	ok(t, srv, "image", "alias", "create", "stable", "zeros")
	if out := ok(t, srv, "image", "alias", "list"); !strings.Contains(out, "stable") {
		t.Fatalf("alias list:\n%s", out)
	}
	ok(t, srv, "image", "alias", "delete", "stable")

	// launch NAME and launch IMAGE NAME.
	ok(t, srv, "launch", "plain")
	ok(t, srv, "launch", "zeros", "vm1")
	fails(t, srv, "guestlink launch takes 1 or 2 arguments, got 3 (usage: guestlink launch [IMAGE] NAME [--backend BACKEND] [-c key=value ...] [flags])", "launch", "a", "b", "c")
	for name, want := range map[string]string{"plain": "", "vm1": "zeros"} {
		var inst wire.Instance
		if err := json.Unmarshal([]byte(ok(t, srv, "info", name, "--format", "json")), &inst); err != nil || inst.Config["volatile.base_image"] != want {
			t.Fatalf("%s: base image %q, want %q (%v)", name, inst.Config["volatile.base_image"], want, err)
		}
	}

	ok(t, srv, "image", "delete", "zeros")
	fails(t, srv, `image "zeros": no image has this alias or fingerprint: not found`, "image", "info", "zeros")
}
