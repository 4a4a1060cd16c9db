package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testenv"
)

// trixieBuildTimeout bounds a first build of the trixie tree (12 min
// measured on a loaded 2-core machine).
const trixieBuildTimeout = 30 * time.Minute

// trixieRoot returns the Debian 13 root filesystem with cloud-init that
// scripts/cloud-init-trixie.sh builds (or finds in its cache).
func trixieRoot(t *testing.T, ctx context.Context) string {
	t.Helper()
	script := filepath.Join(repoRoot(t), "scripts", "cloud-init-trixie.sh")
	if err := exec.CommandContext(ctx, script, "--check").Run(); err != nil {
		testenv.Requires(t, "mmdebstrap", "builds the Debian 13 tree with cloud-init (scripts/install-deps.sh installs it)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Requires(t, "unshare", "runs the datasource chrooted with the socket bind-mounted (util-linux)")
	}
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the trixie tree: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// repoRoot is the repository's top directory (the test runs in daemon/).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// trixieScript runs Debian 13's cloud-init LXD datasource crawl
// (read_metadata) on the socket given as the first argument, its warnings
// (the retries) on stderr.
const trixieScript = `
import json, logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
import cloudinit.sources.DataSourceLXD as lxd
lxd.LXD_SOCKET_PATH = sys.argv[1]
print(json.dumps(lxd.read_metadata()))
`

// TestDevlxdCloudInitTrixie runs Debian 13's cloud-init LXD datasource (the
// one that retries a 500) chrooted in a trixie tree, the sim guest's devlxd
// socket bind-mounted into it, and restarts the daemon during its crawl:
// the daemon is killed, the crawl starts and is answered the agent's 500,
// the daemon starts again on that signal, and the crawl ends with the
// guest's whole metadata.
func TestDevlxdCloudInitTrixie(t *testing.T) {
	t.Parallel()
	// The tree first, on its own clock: a first build (mmdebstrap) takes
	// minutes, later runs find it in the cache at once.
	bctx, bcancel := context.WithTimeout(context.Background(), trixieBuildTimeout)
	root := trixieRoot(t, bctx)
	bcancel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "trixie1"
	g := d.launch(ctx, name, map[string]string{
		"user.meta-data":       "zone: a\n",
		"cloud-init.user-data": "#cloud-config\nhostname: trixie\n",
	}, nil)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	d.kill()
	// A private mount namespace (the bind mount ends with the process);
	// unprivileged, as a user namespace's root.
	args := []string{"--mount", "--fork"}
	if os.Getuid() != 0 {
		args = append(args, "--map-root-user")
	}
	args = append(args, "sh", "-c", `mount --bind "$1" "$2/mnt" && exec chroot "$2" python3 -c "$3" /mnt/sock`,
		"sh", filepath.Dir(g.socket), root, trixieScript)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	restarted := false
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		// The datasource's warning on a 500 it will retry: the crawl is
		// under way with the daemon down.
		if !restarted && strings.Contains(sc.Text(), "[HTTP:500]") {
			d.start()
			restarted = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trixie's DataSourceLXD.read_metadata: %v\n%s", err, log.String())
	}
	if !restarted {
		t.Fatalf("the crawl never saw the daemon down (no 500 retried):\n%s", log.String())
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(stdout.String()), &md); err != nil {
		t.Fatalf("decoding read_metadata output %q: %v\n%s", stdout.String(), err, log.String())
	}
	wantMeta := "instance-id: " + inst.UUID + "\nlocal-hostname: " + name + "\nzone: a\n"
	if md["meta-data"] != wantMeta || md["user-data"] != "#cloud-config\nhostname: trixie\n" || md["_metadata_api_version"] != "1.0" {
		t.Fatalf("read_metadata after the restart: %v\n%s", md, log.String())
	}
	t.Logf("crawl log:\n%s", log.String())
}
