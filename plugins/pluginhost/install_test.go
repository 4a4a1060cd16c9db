package pluginhost_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// TestInstallAndReload installs a new plugin and upgrades a running one
// without restarting the host, with a real plugin binary: Install writes
// the binary and its checksum and starts it; Reload re-reads SHA256SUMS,
// refuses a binary that does not match (both hashes in the error, the old
// process left running) and restarts the plugin on one that does.
func TestInstallAndReload(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": nil})
	h := startHost(t, testConfig(dir, bdir))
	ctx := ctxT(t)

	st, err := h.Install(ctx, "fresh", pluginBin)
	if err != nil || st.Health != pluginhost.HealthHealthy || st.PID == 0 {
		t.Fatalf("Install(fresh) = %+v, %v; want healthy", st, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "fresh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v, %v; want mode 0755", fi, err)
	}
	sums, err := pluginhost.ReadChecksums(filepath.Join(dir, pluginhost.SumsFile))
	if err != nil || len(sums["fresh"]) == 0 || len(sums["good"]) == 0 {
		t.Fatalf("SHA256SUMS after Install: %v, %v; want lines for fresh and good", sums, err)
	}
	b, err := h.Backend("fresh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Info(ctx); err != nil {
		t.Fatalf("Info of the installed plugin: %v", err)
	}

	// An upgrade whose checksum was not written: refused, old process kept.
	// (A new build is renamed over the running binary, as an upgrade
	// does: the running process keeps its file.)
	old := status(h, "good")
	next := filepath.Join(dir, ".good.next")
	copyFile(t, pluginBin, next)
	f, err := os.OpenFile(next, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("new build"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(next, filepath.Join(dir, "good")); err != nil {
		t.Fatal(err)
	}
	_, err = h.Reload(ctx, "good")
	if !errors.Is(err, pluginhost.ErrChecksum) || strings.Count(err.Error(), "sha256 ") != 2 {
		t.Fatalf("Reload with a stale checksum = %v; want ErrChecksum showing both hashes", err)
	}
	if st := status(h, "good"); st.Health != pluginhost.HealthHealthy || st.PID != old.PID {
		t.Fatalf("after a refused reload: %+v; want the old process (pid %d) healthy", st, old.PID)
	}

	// With the checksum written, Reload restarts it on the new binary.
	if err := pluginhost.WriteChecksums(dir); err != nil {
		t.Fatal(err)
	}
	st, err = h.Reload(ctx, "good")
	if err != nil || st.Health != pluginhost.HealthHealthy || st.PID == old.PID || st.PID == 0 {
		t.Fatalf("Reload = %+v, %v; want healthy in a new process (old pid %d)", st, err, old.PID)
	}

	// Install over a running plugin is an upgrade too.
	st, err = h.Install(ctx, "good", pluginBin)
	if err != nil || st.Health != pluginhost.HealthHealthy {
		t.Fatalf("Install over good = %+v, %v", st, err)
	}
}

func TestInstallErrors(t *testing.T) {
	dir, bdir := pluginDir(t, map[string]map[string]any{"good": nil})
	h := startHost(t, testConfig(dir, bdir))
	ctx := ctxT(t)
	for _, name := range []string{"", ".hidden", "a/b", pluginhost.SumsFile, ".."} {
		t.Run(fmt.Sprintf("name %q", name), func(t *testing.T) {
			if _, err := h.Install(ctx, name, pluginBin); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Install(%q) = %v, want ErrInvalid", name, err)
			}
		})
	}
	t.Run("missing source", func(t *testing.T) {
		if _, err := h.Install(ctx, "x", filepath.Join(t.TempDir(), "nope")); err == nil {
			t.Fatal("Install of a missing file succeeded")
		}
		if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a failed install left %v", err)
		}
	})
	t.Run("reload unknown", func(t *testing.T) {
		if _, err := h.Reload(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Reload(nope) = %v, want ErrNotFound", err)
		}
	})
}
