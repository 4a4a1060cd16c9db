package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/core/images/imagetest"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// TestImageCommands runs guestlink image import, list, info, alias and
// delete against a real store, and launch's two argument forms.
func TestImageCommands(t *testing.T) {
	dir := t.TempDir()
	st, err := images.Open(dir, dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	disk := filepath.Join(dir, "zeros.img")
	data := imagetest.Ext(1 << 20) // a raw ext image of 1 MiB
	if err := os.WriteFile(disk, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	fp := hex.EncodeToString(sum[:])

	if out := ok(t, srv, "image", "import", disk, "--alias", "zeros", "-p", "os=none", "-p", "requirements.disk=2GiB"); out != "Image imported with fingerprint: "+fp+"\n" {
		t.Fatalf("import said %q", out)
	}
	fails(t, srv, "importing image "+disk+": an image with fingerprint "+fp+" exists: already exists", "image", "import", disk)
	fails(t, srv, `invalid property "x": want key=value`, "image", "import", disk, "-p", "x")
	if out := ok(t, srv, "image", "list"); !strings.Contains(out, "zeros") || !strings.Contains(out, fp[:12]) || !strings.Contains(out, "1.0MiB") ||
		!regexp.MustCompile(`MIN-MEMORY +MIN-DISK`).MatchString(out) || !regexp.MustCompile(`1\.0MiB +- +2GiB `).MatchString(out) {
		t.Fatalf("list (want the minimum disk, no minimum memory):\n%s", out)
	}
	if out := ok(t, srv, "image", "info", "zeros"); !strings.Contains(out, "Minimum memory: -\nMinimum disk: 2GiB\n") {
		t.Fatalf("info:\n%s", out)
	}
	for _, ref := range []string{"zeros", fp, fp[:10]} {
		var im api.Image
		if err := json.Unmarshal([]byte(ok(t, srv, "image", "info", ref, "--format", "json")), &im); err != nil || im.Fingerprint != fp || im.Properties["os"] != "none" {
			t.Fatalf("info %s = %+v, %v", ref, im, err)
		}
	}
	// public: private after import, set both ways, refused otherwise.
	publicOf := func() bool {
		t.Helper()
		var im api.Image
		if err := json.Unmarshal([]byte(ok(t, srv, "image", "info", "zeros", "--format", "json")), &im); err != nil {
			t.Fatal(err)
		}
		return im.Public
	}
	if publicOf() {
		t.Fatal("an image imported without --public is public")
	}
	if out := ok(t, srv, "image", "set", "zeros", "public=true"); out != "Image "+fp+": public=true\n" || !publicOf() {
		t.Fatalf("set public=true said %q", out)
	}
	if out := ok(t, srv, "image", "info", "zeros"); !strings.Contains(out, "Public: true\n") {
		t.Fatalf("info:\n%s", out)
	}
	if ok(t, srv, "image", "set", fp[:10], "public=false"); publicOf() {
		t.Fatal("set public=false left it public")
	}
	fails(t, srv, `invalid image setting "os": the only key is public`, "image", "set", "zeros", "os=x")
	fails(t, srv, `invalid image setting public="maybe": true or false`, "image", "set", "zeros", "public=maybe")
	fails(t, srv, `image "nope": no image has this alias or fingerprint: not found`, "image", "set", "nope", "public=true")
	ok(t, srv, "image", "alias", "create", "stable", "zeros")
	if out := ok(t, srv, "image", "alias", "list"); !strings.Contains(out, "stable") {
		t.Fatalf("alias list:\n%s", out)
	}
	ok(t, srv, "image", "alias", "delete", "stable")

	// launch NAME and launch IMAGE NAME.
	ok(t, srv, "launch", "plain")
	ok(t, srv, "launch", "zeros", "vm1")
	fails(t, srv, "guestlink launch takes 1 or 2 arguments, got 3 (usage: guestlink launch [IMAGE] NAME [--backend BACKEND] [--target MEMBER] [-c key=value ...] [--wait ready [--timeout 2m]] [flags])", "launch", "a", "b", "c")
	for name, want := range map[string]string{"plain": "", "vm1": fp} {
		var inst api.Instance
		if err := json.Unmarshal([]byte(ok(t, srv, "info", name, "--format", "json")), &inst); err != nil || inst.Config["volatile.base_image"] != want {
			t.Fatalf("%s: base image %q, want %q (%v)", name, inst.Config["volatile.base_image"], want, err)
		}
	}

	ok(t, srv, "image", "delete", "zeros")
	fails(t, srv, `image "zeros": no image has this alias or fingerprint: not found`, "image", "info", "zeros")

	// import --public.
	if out := ok(t, srv, "image", "import", disk, "--alias", "pub", "--public"); out != "Image imported with fingerprint: "+fp+"\n" {
		t.Fatalf("import --public said %q", out)
	}
	var pub api.Image
	if err := json.Unmarshal([]byte(ok(t, srv, "image", "info", "pub", "--format", "json")), &pub); err != nil || !pub.Public {
		t.Fatalf("imported with --public: %+v, %v", pub, err)
	}
}

// TestLaunchImportsLocalImage: launch debian-12 NAME with the image built
// next to the CLI (bin/images/debian-12.img) but not imported imports it
// first, with the recorded inputs as properties.
func TestLaunchImportsLocalImage(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(exe), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	img := filepath.Join(dir, "debian-12.img")
	data := imagetest.Ext(1 << 20)
	data[4096] = 1
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "debian-12.json"), []byte(`{"os":"debian","build_seconds":"182"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := images.Open(t.TempDir(), dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	r := run(t, srv, "launch", "debian-12", "vm1")
	if r.code != 0 || r.stderr != "Importing "+img+" as debian-12\n" {
		t.Fatalf("launch: exit %d, stderr %q", r.code, r.stderr)
	}
	var im api.Image
	if err := json.Unmarshal([]byte(ok(t, srv, "image", "info", "debian-12", "--format", "json")), &im); err != nil || im.Properties["build_seconds"] != "182" {
		t.Fatalf("imported image %+v, %v", im, err)
	}
	fails(t, srv, `creating instance "vm2": image "nope": no image has this alias or fingerprint: not found`, "launch", "nope", "vm2")
	fails(t, srv, `unknown image "ubuntu": guestlink builds debian-12 and debian-13`, "image", "build", "ubuntu")
}

// TestImageProgress: guestlink image progress lists the builds the daemon
// was told of (stage and lines, or the error of a failed one) and its
// imports; --format json gives both lists as the API does, empty lists
// when nothing runs.
func TestImageProgress(t *testing.T) {
	st, err := images.Open(t.TempDir(), dbtest.SQLite(t).(images.MetadataStore), nil, nil, images.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Images: st})
	var none struct {
		Builds  []api.ImageBuild  `json:"builds"`
		Imports []api.ImageImport `json:"imports"`
	}
	if err := json.Unmarshal([]byte(ok(t, srv, "image", "progress", "--format", "json")), &none); err != nil || none.Builds == nil || none.Imports == nil || len(none.Builds)+len(none.Imports) != 0 {
		t.Fatalf("nothing running: %+v, %v (want two empty lists)", none, err)
	}
	lines := int64(42)
	running, _ := st.StartBuild("debian-12")
	if _, err := st.ReportBuild(running.ID, images.BuildReport{Stage: "bootstrap and packages (mmdebstrap)", Lines: &lines}); err != nil {
		t.Fatal(err)
	}
	failed, _ := st.StartBuild("debian-13")
	if _, err := st.ReportBuild(failed.ID, images.BuildReport{Status: images.BuildFailed, Error: "make: exit status 2"}); err != nil {
		t.Fatal(err)
	}
	out := ok(t, srv, "image", "progress")
	for _, want := range []string{`KIND +NAME +STATUS +STAGE +PROGRESS +STARTED`, `build +debian-12 +running +\[1\] bootstrap and packages \(mmdebstrap\) +42 lines `, `build +debian-13 +failed +- +make: exit status 2 `} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("image progress lacks %q:\n%s", want, out)
		}
	}
}
