package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guestlink/guestlink/internal/testenv"
)

// PGBinEnv names an environment variable that may point at the directory
// holding PostgreSQL's initdb and postgres; by default the newest
// /usr/lib/postgresql/*/bin (Debian's layout) is used.
const PGBinEnv = "GUESTLINK_TEST_PGBIN"

// errNoPostgres means the server binaries are not installed.
var errNoPostgres = errors.New("PostgreSQL server binaries not found (looked in $" + PGBinEnv +
	" and /usr/lib/postgresql/*/bin): install the Debian package \"postgresql\" (apt-get install postgresql) to run the PostgreSQL store tests")

const (
	dirPrefix    = "guestlink-pgtest-"
	ownerFile    = "owner.pid"
	startTimeout = 90 * time.Second
	stopTimeout  = 30 * time.Second
)

// cluster is the test binary's private PostgreSQL server.
type cluster struct {
	dir     string // temp dir: data/, the socket, the log
	bin     string // initdb and postgres
	cred    *syscall.Credential
	logPath string
	cmd     *exec.Cmd
	exit    chan struct{} // closed when the postmaster exited
	admin   *pgx.Conn
	mu      sync.Mutex // serialises admin
}

var (
	clusterOnce sync.Once
	clusterErr  error
	shared      *cluster
	stopped     atomic.Bool
	dbCounter   atomic.Int64
)

// PostgresURL creates a new, empty database in the test binary's
// PostgreSQL cluster (starting the cluster on first use) and returns its
// URL; the database is dropped when the test ends. The cluster listens only
// on a Unix socket in its private directory. It skips the test if the server
// binaries are not installed (fails it with CI=true, see internal/testenv).
func PostgresURL(t testing.TB) string {
	t.Helper()
	c, err := startShared()
	if errors.Is(err, errNoPostgres) {
		testenv.Requires(t, "PostgreSQL", err.Error())
	}
	if err != nil {
		t.Fatalf("starting test PostgreSQL cluster: %v", err)
	}
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), dbCounter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := c.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return c.url(name)
}

// Stop stops the PostgreSQL cluster started by PostgresURL, if any, and
// removes its directory. Main calls it; a custom TestMain must call it after
// m.Run. Later PostgresURL calls fail.
func Stop() {
	stopped.Store(true)
	clusterOnce.Do(func() { clusterErr = errors.New("test PostgreSQL cluster already stopped") })
	if shared != nil {
		shared.stop()
	}
}

func startShared() (*cluster, error) {
	clusterOnce.Do(func() {
		if stopped.Load() {
			clusterErr = errors.New("test PostgreSQL cluster already stopped")
			return
		}
		shared, clusterErr = startCluster()
	})
	return shared, clusterErr
}

// pgBinDir finds the directory of initdb and postgres.
func pgBinDir() (string, error) {
	if d := os.Getenv(PGBinEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("$%s=%q: %w", PGBinEnv, d, errNoPostgres)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) == 0 {
		return "", errNoPostgres
	}
	// Newest major version first.
	slices.SortFunc(matches, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	return filepath.Dir(matches[0]), nil
}

// serverCredential returns who runs initdb and postgres: they refuse to run
// as root, so root runs them as the "postgres" system user.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no \"postgres\" user to run the server as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("parsing the postgres user's ids: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// tempBase picks a directory for the cluster whose socket path fits in
// sun_path and which the server user can reach.
func tempBase(cred *syscall.Credential) string {
	base := os.TempDir()
	if cred != nil || len(base) > 60 {
		base = "/tmp"
	}
	return base
}

// removeStale deletes cluster directories left by test binaries that died
// without Stop.
func removeStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			removeAllBestEffort(d)
		}
	}
}

func startCluster() (*cluster, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	base := tempBase(cred)
	removeStale(base)
	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, exit: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	if cred != nil {
		for _, p := range []string{dir, logPath} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}

	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	c.bin, c.cred, c.logPath = bin, cred, logPath
	if err := c.run(); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// run starts the postmaster on the cluster's data directory and waits
// until it accepts connections.
func (c *cluster) run() error {
	lf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	bin, data, dir, logPath := c.bin, filepath.Join(c.dir, "data"), c.dir, c.logPath
	c.exit = make(chan struct{})
	// fsync stays on: the store's durability tests and benchmark figures
	// must mean what they say.
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-k", dir,
		"-c", "listen_addresses=",
		"-c", "unix_socket_permissions=0700",
		"-c", "max_connections=300",
		"-c", "shared_buffers=32MB",
		"-c", "log_min_messages=warning",
	)
	c.cmd.Stdout = lf
	c.cmd.Stderr = lf
	// Should the test binary die without Stop, the postmaster gets SIGQUIT
	// (immediate shutdown) and takes its backends with it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exit)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			c.admin = conn
			break
		}
		select {
		case <-c.exit:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited during start-up:\n%s", log)
		case <-ctx.Done():
			return fmt.Errorf("postgres not accepting connections after %v: %w", startTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// url returns the URL of database name in the cluster.
func (c *cluster) url(name string) string {
	q := url.Values{"host": {c.dir}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + name + "?" + q.Encode()
}

func (c *cluster) exec(ctx context.Context, sql string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admin == nil {
		return errors.New("test PostgreSQL cluster stopped")
	}
	_, err := c.admin.Exec(ctx, sql)
	return err
}

// stop shuts the server down (fast shutdown, then SIGKILL) and removes its
// directory.
func (c *cluster) stop() {
	c.halt(syscall.SIGINT)
	removeAllBestEffort(c.dir)
}

// halt closes the admin connection and stops the postmaster with sig
// (SIGINT: fast shutdown; SIGQUIT: immediate), then SIGKILL after
// stopTimeout; the data directory stays.
func (c *cluster) halt(sig syscall.Signal) {
	c.mu.Lock()
	if c.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.admin.Close(ctx)
		cancel()
		c.admin = nil
	}
	c.mu.Unlock()
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
		select {
		case <-c.exit:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.exit
		}
	}
}
