package daemon_test

// Helpers of the daemon-level benchmarks (bench_test.go): a real guestlinkd
// process on a private state directory, bulk instance creation, process
// statistics from /proc, a latency recorder and the load generator that
// plays the agents of many sim guests (benchAgentPlayer).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
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

	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/transport"
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
// socket answers. It is stopped at cleanup.
func benchStartDaemon(b *testing.B, bin, stateDir string) *benchDaemon {
	b.Helper()
	d := &benchDaemon{b: b, bin: bin, StateDir: stateDir}
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
		"--plugin-dir", filepath.Join(d.bin, "plugins"), "--log-level", "warn")
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

// benchAgentPlayer plays the agent of one running sim guest without running
// it: with the guest's own agent.crt/agent.key and the advertisement in its
// agent.conf (both from the config drive, <guest dir>/rootfs/run/
// guestlink-agent/), it talks to the daemon's devlxd handlers on the hybrid
// socket the daemon listens on for that guest (<guest dir>/link.sock_<port>),
// in the agent's own request form (agent/upstream: TLS, pinned daemon
// certificate, kept-alive connection). It can also write ring words into the
// guest's wired serial port, as the agent does.
//
// The dashboard benchmark can reuse it: start sim guests whose sim.command is
// "exec sleep 3600", then call benchNewAgentPlayer(name, guestDir, false) for each one
// (guest_dir is in the instance's details) and Ready().
type benchAgentPlayer struct {
	Name     string
	GuestDir string
	up       *upstream.Client
	cert     tls.Certificate

	stop    chan struct{}
	stopped sync.WaitGroup
	ln      *hybrid.Listener
	srv     *http.Server
}

// benchNewAgentPlayer prepares the player of the running guest in guestDir;
// perRequestTLS makes it handshake TLS for every request, as the agent's
// --tls-per-request mode does.
func benchNewAgentPlayer(name, guestDir string, perRequestTLS bool) (*benchAgentPlayer, error) {
	cfgDir := filepath.Join(guestDir, "rootfs", "run", "guestlink-agent")
	cert, err := tls.LoadX509KeyPair(filepath.Join(cfgDir, "agent.crt"), filepath.Join(cfgDir, "agent.key"))
	if err != nil {
		return nil, fmt.Errorf("loading agent key pair of instance %q: %w", name, err)
	}
	conf, err := os.ReadFile(filepath.Join(cfgDir, "agent.conf"))
	if err != nil {
		return nil, fmt.Errorf("reading agent.conf of instance %q: %w", name, err)
	}
	adv, err := advert.Parse(conf)
	if err != nil {
		return nil, fmt.Errorf("agent.conf of instance %q: %w", name, err)
	}
	link, err := transport.Parse("hybrid:" + filepath.Join(guestDir, "link.sock"))
	if err != nil {
		return nil, fmt.Errorf("link of instance %q: %w", name, err)
	}
	up := upstream.New(upstream.Options{Link: link, Certificate: cert, PerRequestTLS: perRequestTLS})
	if err := up.SetAdvertisement(adv); err != nil {
		return nil, fmt.Errorf("advertisement of instance %q: %w", name, err)
	}
	return &benchAgentPlayer{Name: name, GuestDir: guestDir, up: up, cert: cert, stop: make(chan struct{})}, nil
}

// Get sends GET path to the daemon and fails unless it answers 200.
func (p *benchAgentPlayer) Get(ctx context.Context, path string) error {
	env, err := p.up.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return fmt.Errorf("GET %s for instance %q: %w", path, p.Name, err)
	}
	if env.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s for instance %q: answered %d %q", path, p.Name, env.ErrorCode, env.Error)
	}
	return nil
}

// SetState sends PATCH /1.0 {"state": state} (devlxdapi.StateReady or
// StateStarted) and fails unless the daemon accepted it.
func (p *benchAgentPlayer) SetState(ctx context.Context, state string) error {
	body := []byte(`{"state":"` + state + `"}`)
	env, err := p.up.Do(ctx, http.MethodPatch, "/1.0", body)
	if err != nil {
		return fmt.Errorf("PATCH /1.0 %s for instance %q: %w", state, p.Name, err)
	}
	if env.Type == devlxdapi.TypeError || env.StatusCode != http.StatusOK {
		return fmt.Errorf("PATCH /1.0 %s for instance %q: answered %d %q", state, p.Name, env.ErrorCode, env.Error)
	}
	return nil
}

// WriteWord writes a ring word line ("STARTED", "CONNECTED", "STOPPED")
// into the guest's wired serial port (com.canonical.lxd).
func (p *benchAgentPlayer) WriteWord(word string) error {
	port := filepath.Join(p.GuestDir, "rootfs", "dev", "virtio-ports", "com.canonical.lxd")
	f, err := os.OpenFile(port, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening serial port of instance %q: %w", p.Name, err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(word + "\n")); err != nil {
		return fmt.Errorf("writing %s to instance %q: %w", word, p.Name, err)
	}
	return nil
}

// Connect plays the agent's start-up and keeps it connected: it serves the
// agent's link port (8443) on the guest's hybrid socket with TLS (agent
// certificate; the daemon's client certificate from server.crt required),
// writes STARTED, answers the daemon's advertisement (PUT /1.0) and then
// writes CONNECTED, and repeats CONNECTED every heartbeat, as the agent does,
// until Close.
func (p *benchAgentPlayer) Connect(heartbeat time.Duration) error {
	cfgDir := filepath.Join(p.GuestDir, "rootfs", "run", "guestlink-agent")
	pemData, err := os.ReadFile(filepath.Join(cfgDir, "server.crt"))
	if err != nil {
		return fmt.Errorf("reading server.crt of instance %q: %w", p.Name, err)
	}
	block, _ := pem.Decode(pemData)
	if block == nil {
		return fmt.Errorf("server.crt of instance %q holds no PEM block", p.Name)
	}
	daemonClient := block.Bytes
	ln, err := hybrid.Listen(filepath.Join(p.GuestDir, "link.sock"))
	if err != nil {
		return fmt.Errorf("serving the link of instance %q: %w", p.Name, err)
	}
	p.ln = ln
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{p.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS12,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], daemonClient) {
				return errors.New("client certificate is not the daemon's")
			}
			return nil
		},
	}
	ok, _ := devlxdapi.SyncResponse(nil)
	p.srv = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, advert.MaxSize+1))
			if err != nil {
				return
			}
			if r.Method == http.MethodPut && r.URL.Path == "/1.0" {
				a, err := advert.Parse(body)
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write(devlxdapi.ErrorResponse(http.StatusBadRequest, err.Error()))
					return
				}
				if err := p.up.SetAdvertisement(a); err != nil {
					w.WriteHeader(http.StatusInternalServerError)
					_, _ = w.Write(devlxdapi.ErrorResponse(http.StatusInternalServerError, err.Error()))
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(ok)
			if r.Method == http.MethodPut {
				if f, isFlusher := w.(http.Flusher); isFlusher {
					f.Flush()
				}
				_ = p.WriteWord("CONNECTED")
			}
		}),
	}
	p.stopped.Add(2)
	go func() {
		defer p.stopped.Done()
		_ = p.srv.Serve(tls.NewListener(ln.Port(8443), tlsConf))
	}()
	go func() {
		defer p.stopped.Done()
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				_ = p.WriteWord("CONNECTED")
			}
		}
	}()
	return p.WriteWord("STARTED")
}

// Close stops playing the agent and drops the player's connections.
func (p *benchAgentPlayer) Close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
		if p.srv != nil {
			_ = p.srv.Close()
			_ = p.ln.Close()
		}
		p.stopped.Wait()
	}
	p.up.CloseIdleConnections()
}
