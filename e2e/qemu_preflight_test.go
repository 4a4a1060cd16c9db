package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// pathWithout returns a PATH of one directory holding a symbolic link to
// every program of the test's PATH (the first of each name, as a lookup
// finds it) but the ones named in drop.
func pathWithout(t *testing.T, drop ...string) string {
	t.Helper()
	dir := t.TempDir()
	seen := map[string]bool{}
	for _, name := range drop {
		seen[name] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			if err := os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestQEMUPreflight runs the daemon and its real qemu plugin with a PATH
// lacking qemu-img (the plugins get the daemon's environment). guestlink
// backends shows qemu "unhealthy" and names the Debian package; a launch,
// from an image or from a kernel, is refused with that message before
// anything is made: no instance, no guest directory, no instance files. Then
// qemu-img is "installed" (linked into that PATH): the plugin turns healthy
// at a health ping, without a restart.
func TestQEMUPreflight(t *testing.T) {
	t.Parallel()
	binaries(t)
	path := pathWithout(t, "qemu-img")
	d := newDaemonEnv(t, []string{"PATH=" + path}, "--plugin-dir", qemuPlugins(t))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const problem = "qemu-img not found in PATH (Debian package qemu-utils)"
	out := d.cli(ctx, "backends")
	var row string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); row == "" && len(f) > 1 && f[0] == "qemu" {
			row = line // the table's row, not the note below it
		}
	}
	if f := strings.Fields(row); len(f) < 2 || f[1] != "unhealthy" {
		t.Fatalf("guestlink backends: the qemu row is %q, want health unhealthy; output:\n%s", row, out)
	}
	if !strings.Contains(out, "qemu cannot run guests: "+problem+"; install: apt-get install qemu-utils\n") {
		t.Fatalf("guestlink backends does not say what qemu lacks and how to install it:\n%s", out)
	}
	// Only what is missing is named: with QEMU installed, nothing else.
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil && strings.Contains(out, "Debian package qemu-system-x86)") {
		t.Errorf("guestlink backends names QEMU, which is installed:\n%s", out)
	}
	var list []api.Backend
	if err := json.Unmarshal([]byte(d.cli(ctx, "backends", "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	var qemu api.Backend
	for _, b := range list {
		if b.Name == "qemu" {
			qemu = b
		}
	}
	if qemu.Health != "unhealthy" || qemu.PID == 0 || !slices.Contains(qemu.Missing, api.BackendMissing{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"}) {
		t.Fatalf("backends JSON for qemu = %+v, want unhealthy, running, qemu-img missing", qemu)
	}

	for _, launch := range [][]string{
		{"launch", "mydistro", "vm1", "--backend", "qemu"}, // the command: the image does not even exist
		{"launch", "vm2", "--backend", "qemu", "-c", "qemu.kernel=/nonexistent/vmlinuz"},
	} {
		_, errOut, err := d.runCLI(ctx, launch...)
		want := `backend "qemu" cannot run guests: ` + problem + "; install: apt-get install qemu-utils"
		if err == nil || !strings.Contains(errOut, want) {
			t.Fatalf("guestlink %s: err %v, stderr %q; want a refusal containing %q", strings.Join(launch, " "), err, errOut, want)
		}
	}
	if insts, err := d.client.Instances(ctx, client.InstanceFilter{}); err != nil || len(insts) != 0 {
		t.Fatalf("after refused launches the daemon lists %d instances (%v), want none", len(insts), err)
	}
	for _, sub := range []string{"instances", filepath.Join("plugins", "qemu")} {
		entries, err := os.ReadDir(filepath.Join(d.stateDir, sub))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("after refused launches %s holds %d entries, want none", sub, len(entries))
		}
	}

	// A restart does not help, and says why.
	if out := d.cli(ctx, "backends", "restart", "qemu-legacy"); !strings.HasPrefix(out, "Backend qemu-legacy restarted: unhealthy, pid ") ||
		!strings.Contains(out, ": it cannot run guests: "+problem) {
		t.Fatalf("guestlink backends restart qemu-legacy = %q, want it unhealthy naming qemu-utils", out)
	}

	img, err := exec.LookPath("qemu-img")
	if err != nil {
		testenv.Requires(t, "qemu-img", "not installed, so it cannot be put in the daemon's PATH (scripts/install-deps.sh installs qemu-utils)")
	}
	if err := os.Symlink(img, filepath.Join(path, "qemu-img")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the qemu plugin to see qemu-img at a health ping", time.Minute, func() bool {
		list, err := d.client.Backends(ctx)
		for _, b := range list {
			if b.Name == "qemu" {
				return err == nil && b.Health == "healthy" && b.PID == qemu.PID && b.Problem == ""
			}
		}
		return false
	})
}
