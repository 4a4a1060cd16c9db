package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// requirePostgresServer fails (CI) or skips the test when PostgreSQL's
// server binaries, which scripts/cluster-demo.sh runs, are not installed.
func requirePostgresServer(t *testing.T) {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
		testenv.Requires(t, "PostgreSQL", "no /usr/lib/postgresql/*/bin/initdb: apt-get install postgresql (make deps)")
	}
}

// demoDir is the temporary directory cluster-demo.sh announces on its first line.
var demoDir = regexp.MustCompile(`PostgreSQL in (/tmp/guestlink-cluster\.[A-Za-z0-9]+)/pg`)

// assertDemoGone checks that nothing of a cluster-demo run is left: its
// directory and every process (daemons, PostgreSQL) that named it.
func assertDemoGone(t *testing.T, dir string) {
	t.Helper()
	var left []proc
	testwait.Until(15*time.Second, func() bool {
		left = procsUnder(dir)
		return len(left) == 0
	})
	if len(left) != 0 {
		t.Errorf("processes of %s left after cluster-demo.sh ended: %+v", dir, left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster-demo.sh left %s behind (%v)", dir, err)
	}
}

// TestClusterDemoCheck runs make cluster-demo's script in its check mode:
// a private PostgreSQL, three members (two joining with tokens from the
// first), a guest launched on host3 through host1 and read through host2;
// then everything it made is gone.
func TestClusterDemoCheck(t *testing.T) {
	requirePostgresServer(t)
	t.Parallel()
	script := scriptTree(t, "cluster-demo.sh")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "--check")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster-demo.sh --check: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"host1 is up", "host2 is up", "host3 is up", "check passed"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`(?m)^host3 +127\.0\.0\.1:\d+ .* online `).MatchString(text) {
		t.Errorf("cluster list does not show host3 online:\n%s", text)
	}
	m := demoDir.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("cluster-demo.sh did not name its directory:\n%s", text)
	}
	assertDemoGone(t, m[1])
}

// TestClusterDemoStopsOnSIGTERM runs the script as make cluster-demo
// does: it prints how to reach the members and waits; SIGTERM (what
// Ctrl-C becomes for a script run by make) ends it with exit 0 and
// nothing left.
func TestClusterDemoStopsOnSIGTERM(t *testing.T) {
	requirePostgresServer(t)
	t.Parallel()
	script := scriptTree(t, "cluster-demo.sh")
	cmd := exec.Command(script)
	cmd.Env = cleanEnv()
	out, lines, stderr := startUntilBanner(t, cmd, "cluster-demo.sh", "Logs: ")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m := demoDir.FindStringSubmatch(strings.Join(out, "\n"))
	if m == nil {
		t.Fatalf("cluster-demo.sh did not name its directory:\n%s", strings.Join(out, "\n"))
	}
	// The banner's commands work as printed.
	list := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), "--state-dir", m[1]+"/host2", "cluster", "list")
	list.Env = cleanEnv()
	if b, err := list.CombinedOutput(); err != nil || strings.Count(string(b), " online ") != 3 {
		t.Fatalf("cluster list through host2: %v\n%s", err, b)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cluster-demo.sh after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	assertDemoGone(t, m[1])
}
