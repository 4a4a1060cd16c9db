package dbtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
)

// childEnv makes the re-executed test binary start a cluster, print the
// postmaster's pid and directory, and wait to be killed.
const childEnv = "GUESTLINK_DBTEST_CHILD"

// TestMain checks, after the tests, that Stop leaves no server process and
// no directory behind.
func TestMain(m *testing.M) {
	code := m.Run()
	var pid int
	var dir string
	if shared != nil {
		pid, dir = shared.cmd.Process.Pid, shared.dir
	}
	Stop()
	if pid != 0 {
		if err := waitGone(pid, stopTimeout); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: after Stop:", err)
			code = 1
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "FAIL: cluster directory %s still there after Stop (%v)\n", dir, err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitGone waits until process pid has exited.
func waitGone(pid int, timeout time.Duration) error {
	if err := testwait.ProcessExit(pid, timeout); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

func TestEnginesGiveFreshDatabases(t *testing.T) {
	for _, e := range Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := context.Background()
			u1, u2 := e.URL(t), e.URL(t)
			if u1 == u2 {
				t.Fatalf("two calls gave the same database %q", u1)
			}
			s1, s2 := Open(t, u1), Open(t, u2)
			if err := s1.CreateInstance(ctx, &db.Instance{Name: "only-in-1", UUID: "00000000-0000-0000-0000-000000000001", PowerState: "stopped"}); err != nil {
				t.Fatal(err)
			}
			list, err := s2.ListInstances(ctx, db.InstanceFilter{})
			if err != nil || len(list) != 0 {
				t.Fatalf("second database: %d instances, err %v; want an empty database", len(list), err)
			}
		})
	}
}

func TestPostgresListensOnlyOnItsSocket(t *testing.T) {
	PostgresURL(t) // starts the cluster or skips
	fi, err := os.Stat(shared.dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("cluster directory mode %o, want 700", perm)
	}
	b, err := os.ReadFile(shared.dir + "/data/postmaster.pid")
	if err != nil {
		t.Fatal(err)
	}
	// postmaster.pid line 6 is the listen address ("" when only Unix sockets).
	lines := strings.Split(string(b), "\n")
	if len(lines) < 6 || strings.TrimSpace(lines[5]) != "" {
		t.Errorf("postmaster listens on TCP address %q, want none", lines[5])
	}
}

// TestClusterDiesWithTestBinary kills a test binary that started a cluster
// without Stop and checks that its postmaster goes too.
func TestClusterDiesWithTestBinary(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		u := PostgresURL(t)
		fmt.Printf("CLUSTER %d %s\n", shared.cmd.Process.Pid, u)
		select {} // until the parent kills us
	}
	if _, err := pgBinDir(); err != nil {
		testenv.Requires(t, "PostgreSQL", err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestClusterDiesWithTestBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	pid := 0
	var u string
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "CLUSTER %d %s", &pid, &u); err == nil {
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child never reported its cluster")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if err := waitGone(pid, stopTimeout); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal(err)
	}
	t.Logf("postmaster %s gone after its test binary was killed", strconv.Itoa(pid))

	// The next cluster start removes the dead binary's directory.
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	dir := parsed.Query().Get("host")
	if !strings.Contains(dir, dirPrefix) {
		t.Fatalf("child's cluster directory %q", dir)
	}
	removeStale(filepath.Dir(dir))
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale cluster directory %s not removed (%v)", dir, err)
	}
}

// TestPostgres opens a Store on a fresh, empty database of the cluster.
func TestPostgres(t *testing.T) {
	s := Postgres(t)
	list, err := s.ListInstances(context.Background(), db.InstanceFilter{})
	if err != nil || len(list) != 0 {
		t.Fatalf("fresh database: %d instances, err %v; want an empty database", len(list), err)
	}
}
