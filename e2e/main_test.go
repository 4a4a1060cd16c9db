package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// binDir holds the binaries the first test builds (see binaries): guestlinkd, guestlink,
// guestlink-agent and plugins/sim (with its SHA256SUMS). The sim plugin finds
// the agent at ../guestlink-agent, as in a make build.
var binDir string

// testParallel is how many end-to-end tests run at once unless -parallel is
// given: they mostly wait on heartbeats, so more than GOMAXPROCS helps.
const testParallel = 6

// TestMain raises the open-file limit (the
// 1,000-connection test and the daemon it starts need it), runs the tests and
// stops the PostgreSQL cluster if one was started.
func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	if err := raiseFileLimit(); err != nil {
		return 1, err
	}
	defer dbtest.Stop()
	defer func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}()
	return m.Run(), nil
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds the binaries into binDir on first use (benchmarks run
// with -run '^$' never pay for it) and fails the test if that failed.
func binaries(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "guestlink-e2e-bin-")
		if err != nil {
			buildErr = fmt.Errorf("creating the binary directory: %w", err)
			return
		}
		binDir = dir
		buildErr = buildBinaries(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// buildBinaries puts the daemon, CLI, agent and sim plugin into dir in
// `make build`'s layout (internal/testbin's builds: static, trimmed paths,
// built once per content, or taken from GUESTLINK_BIN) and writes the
// plugin checksums.
func buildBinaries(dir string) error {
	plugins := filepath.Join(dir, "plugins")
	for _, b := range []struct{ pkg, path string }{
		{testbin.Daemon, "guestlinkd"},
		{testbin.CLI, "guestlink"},
		{testbin.Agent, "guestlink-agent"},
		{testbin.Sim, "plugins/sim"},
		{testbin.Fleet, "plugins/fleet"},
	} {
		if err := testbin.Install(b.pkg, filepath.Join(dir, b.path)); err != nil {
			return err
		}
	}
	if err := pluginhost.WriteChecksums(plugins); err != nil {
		return fmt.Errorf("writing plugin checksums: %w", err)
	}
	return nil
}

// raiseFileLimit sets the soft open-file limit to the hard one; child
// processes (the daemon) inherit it.
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	if lim.Cur < minFiles {
		return fmt.Errorf("RLIMIT_NOFILE is %d; the tests need %d (raise the hard limit)", lim.Cur, minFiles)
	}
	return nil
}

// minFiles is the open-file limit the 1,000-connection test needs in this
// process and in the daemon (each holds one fd per connection).
const minFiles = 4096
