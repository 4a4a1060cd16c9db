package e2e

// Helpers of the daemon-level benchmarks (bench_test.go): a real guestlinkd
// process on a private state directory, bulk instance creation, process
// statistics from /proc and a latency recorder. The load generator that
// plays the agents of many sim guests (benchAgentPlayer) is in
// bench_agent_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// benchBinEnv names a directory holding guestlinkd, guestlink-agent and
// plugins/sim with its SHA256SUMS (what make build writes to bin/). When it
// is unset the benchmarks use the binaries the package's TestMain built
// (binDir, main_test.go).
const benchBinEnv = "GUESTLINK_BIN"

// benchBinaries returns a directory with guestlinkd, guestlink-agent and
// plugins/sim (+ SHA256SUMS).
func benchBinaries(b *testing.B) string {
	b.Helper()
	dir := os.Getenv(benchBinEnv)
	if dir == "" {
		dir = binDir
	}
	if dir == "" {
		b.Fatalf("no binaries: set %s or run through the package's TestMain", benchBinEnv)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		b.Fatalf("binary directory %q: %v", dir, err)
	}
	for _, f := range []string{"guestlinkd", "guestlink-agent", "plugins/sim", "plugins/SHA256SUMS"} {
		if _, err := os.Stat(filepath.Join(abs, f)); err != nil {
			b.Fatalf("binary directory %q lacks %s (run make build): %v", dir, f, err)
		}
	}
	return abs
}

// benchRaiseNoFile raises the soft RLIMIT_NOFILE to the hard limit: the
// daemon's children inherit it and a thousand guests need many descriptors.
func benchRaiseNoFile(b *testing.B) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatalf("reading RLIMIT_NOFILE: %v", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatalf("raising RLIMIT_NOFILE: %v", err)
		}
	}
}

// benchDaemon is a guestlinkd process on a private state directory.
type benchDaemon struct {
	b        *testing.B
	bin      string
	StateDir string
	Socket   string
	Client   *client.Client
	// Args are extra daemon flags (set before start).
	Args []string

	cmd    *exec.Cmd
	waited chan struct{}
	log    *os.File
}

// benchNewStateDir makes a short state directory (Unix socket paths of
// guests below it must stay under 108 bytes) removed at cleanup, after every
// process started below it was killed.
func benchNewStateDir(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "glb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		benchKillUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			b.Logf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// benchStartDaemon execs guestlinkd on stateDir and waits until its admin
// socket answers, with extra flags args. It is stopped at cleanup.
func benchStartDaemon(b *testing.B, bin, stateDir string, args ...string) *benchDaemon {
	b.Helper()
	d := &benchDaemon{b: b, bin: bin, StateDir: stateDir, Args: args}
	if _, err := d.start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() && d.cmd != nil {
			_ = d.cmd.Process.Signal(syscall.SIGQUIT) // goroutine dump into the log
			select {
			case <-d.waited:
			case <-time.After(5 * time.Second):
			}
			data, _ := os.ReadFile(filepath.Join(d.StateDir, "guestlinkd.log"))
			b.Logf("guestlinkd log:\n%s", data)
		}
		d.Stop()
	})
	return d
}

// start execs the daemon and returns how long it took until GET /1.0
// answered on the admin socket.
func (d *benchDaemon) start() (time.Duration, error) {
	logf, err := os.OpenFile(filepath.Join(d.StateDir, "guestlinkd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("opening daemon log: %w", err)
	}
	d.Socket = filepath.Join(d.StateDir, "guestlink.sock")
	cmd := exec.Command(filepath.Join(d.bin, "guestlinkd"), "--state-dir", d.StateDir,
		"--plugin-dir", filepath.Join(d.bin, "plugins"), "--log-level", "warn",
		// The benchmarks measure latency at rates above a guest's default
		// budgets (which TestRingFlood and the storm tests cover).
		"--guest-state-changes", "100000", "--guest-ring-lines", "100000", "--guest-ring-bytes", "100000000")
	cmd.Args = append(cmd.Args, d.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	began := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, fmt.Errorf("starting guestlinkd: %w", err)
	}
	d.cmd, d.log, d.waited = cmd, logf, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(d.waited)
	}()
	if d.Client == nil {
		if d.Client, err = client.New(d.Socket); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := d.Client.ServerInfo(ctx)
		cancel()
		if err == nil {
			return time.Since(began), nil
		}
		select {
		case <-d.waited:
			return 0, fmt.Errorf("guestlinkd exited during start-up: %s", d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("guestlinkd did not answer within 10 minutes: %v", err)
		}
		time.Sleep(2 * time.Millisecond) // the measurement's resolution: cold start is timed to the first answer
	}
}

// PID returns the daemon's process id.
func (d *benchDaemon) PID() int { return d.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the exit (SIGKILL after a minute).
// Guests keep running, as after any daemon stop.
func (d *benchDaemon) Stop() {
	if d.cmd == nil {
		return
	}
	d.Client.Close()
	_ = d.cmd.Process.Signal(syscall.SIGTERM) // fails harmlessly after an exit
	select {
	case <-d.waited:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.waited
	}
	d.log.Close()
	d.cmd = nil
}

// Restart stops the daemon and execs it again on the same state directory;
// it returns the time from exec to the first answer on the admin socket.
func (d *benchDaemon) Restart() (time.Duration, error) {
	d.Stop()
	return d.start()
}

// Start starts the daemon again after Stop and returns how long it took
// to answer.
func (d *benchDaemon) Start() (time.Duration, error) { return d.start() }

func (d *benchDaemon) logTail() string {
	data, _ := os.ReadFile(filepath.Join(d.StateDir, "guestlinkd.log"))
	if len(data) > 64<<10 {
		data = data[len(data)-64<<10:]
	}
	return string(data)
}

// benchCreate creates n instances name-0..name-(n-1) with config through
// the API, conc at a time, starting them when start is set.
func benchCreate(ctx context.Context, c *client.Client, prefix string, n, conc int, config map[string]string, start bool) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for i := range n {
		g.Go(func() error {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := c.Create(ctx, api.InstancesPost{Name: name, Backend: "sim", Config: config, Start: start}); err != nil {
				return fmt.Errorf("creating instance %q: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// benchKillUnder SIGKILLs every process of ours whose command line or
// environment names dir (the VMMs and guests of a benchmark's state
// directory), so that nothing outlives a benchmark.
func benchKillUnder(dir string) {
	if dir == "" || dir == "/" {
		return
	}
	// The directory as a whole argument or as a path prefix.
	needles := [][]byte{[]byte(dir + "/"), []byte(dir + "\x00")}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && (bytes.Contains(data, needles[0]) || bytes.Contains(data, needles[1])) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// benchProcStatus returns a field of /proc/<pid>/status in kB (VmRSS).
func benchProcStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// benchCPUTime returns the user+system CPU time a process used so far.
func benchCPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces: fields start after ")".
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %w", pid, err)
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck, nil
}

// benchChildren returns the pids whose parent is pid.
func benchChildren(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// benchLatency records durations and reports percentiles.
type benchLatency struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one duration.
func (l *benchLatency) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Percentile returns the p-th percentile (0..100), or 0 without samples.
func (l *benchLatency) Percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)) * p / 100)
	return s[min(i, len(s)-1)]
}

// Report adds "<prefix>median-<unit>" and "<prefix>p99-<unit>" to b.
func (l *benchLatency) Report(b *testing.B, prefix string, unit time.Duration) {
	name := map[time.Duration]string{time.Microsecond: "µs", time.Millisecond: "ms"}[unit]
	b.ReportMetric(float64(l.Percentile(50))/float64(unit), prefix+"median-"+name)
	b.ReportMetric(float64(l.Percentile(99))/float64(unit), prefix+"p99-"+name)
}
