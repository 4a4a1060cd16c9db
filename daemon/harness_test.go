package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/internal/testwait"
)

// Timeouts of the end-to-end tests: generous, as the machine is loaded.
const (
	daemonStartTimeout = 60 * time.Second
	agentTimeout       = 60 * time.Second // launch until the agent is connected
	opTimeout          = 30 * time.Second // one API call or state change
	testTimeout        = 3 * time.Minute  // a whole test
	logTailLines       = 80
)

// daemonProc is a guestlinkd child process on a private state directory.
type daemonProc struct {
	t        *testing.T
	stateDir string
	extra    []string
	logPath  string
	client   *client.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// newDaemon starts guestlinkd on a fresh state directory with extra flags.
// At the end of the test it deletes every instance (force), stops the
// daemon, kills and reports any process left behind by the state directory,
// and prints the daemon's log tail if the test failed.
func newDaemon(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	binaries(t)
	// Unix socket paths are limited to 107 bytes: keep the state dir short.
	dir, err := os.MkdirTemp("", "gle2e-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{t: t, stateDir: dir, extra: extra, logPath: filepath.Join(dir, "daemon.log")}
	c, err := client.New(filepath.Join(dir, "guestlink.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d.client = c
	t.Cleanup(func() {
		d.cleanup()
		if t.Failed() {
			t.Logf("daemon log tail (%s):\n%s", d.logPath, d.logTail(logTailLines))
		}
		c.Close()
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	d.start()
	return d
}

// start runs the daemon and waits until its admin socket answers.
func (d *daemonProc) start() {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== test: starting guestlinkd at %s\n", time.Now().Format(time.RFC3339Nano))
	args := append([]string{"--state-dir", d.stateDir, "--plugin-dir", filepath.Join(binDir, "plugins")}, d.extra...)
	cmd := exec.Command(filepath.Join(binDir, "guestlinkd"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	// The daemon dies with the test binary (a -timeout panic runs no
	// cleanup); its plugins die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting guestlinkd: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), daemonStartTimeout)
	defer cancel()
	for {
		if _, err := d.client.ServerInfo(ctx); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("guestlinkd exited during start-up (%v); log tail:\n%s", cmd.ProcessState, d.logTail(logTailLines))
		case <-ctx.Done():
			t.Fatalf("guestlinkd did not answer within %v; log tail:\n%s", daemonStartTimeout, d.logTail(logTailLines))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cleanEnv is the test's environment without variables that would steer
// the daemon or its children elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GUESTLINK_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// pid returns the daemon's process id.
func (d *daemonProc) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid
}

// running reports whether the daemon process is alive.
func (d *daemonProc) running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the daemon and waits for it to exit.
func (d *daemonProc) signal(sig syscall.Signal, within time.Duration) error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(within):
		// A hung daemon: SIGQUIT makes the Go runtime write every
		// goroutine's stack to the log before it exits.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		return fmt.Errorf("guestlinkd did not exit within %v of %v; its goroutine dump is in %s", within, sig, d.logPath)
	}
}

// kill kills the daemon with SIGKILL.
func (d *daemonProc) kill() {
	d.t.Helper()
	if err := d.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		d.t.Fatal(err)
	}
}

// cleanup deletes every instance, stops the daemon and kills what is left.
func (d *daemonProc) cleanup() {
	t := d.t
	if d.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if list, err := d.client.Instances(ctx, client.InstanceFilter{}); err != nil {
			t.Errorf("cleanup: listing instances: %v", err)
		} else {
			for _, inst := range list {
				if err := d.client.Delete(ctx, inst.Name, true); err != nil {
					t.Errorf("cleanup: deleting %s: %v", inst.Name, err)
				}
			}
		}
		cancel()
		if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	// Plugins die with the daemon, VMMs with their guests' deletion; give
	// exiting processes a moment before calling them leftovers.
	var left []proc
	testwait.Until(15*time.Second, func() bool {
		left = procsUnder(d.stateDir)
		return len(left) == 0
	})
	for _, p := range left {
		t.Errorf("cleanup: process %d (%s) of state dir %s still running; killing it", p.pid, p.cmdline, d.stateDir)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// logTail returns the last n lines of the daemon's log.
func (d *daemonProc) logTail(n int) string {
	data, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", d.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// log returns the daemon's whole log.
func (d *daemonProc) log() string {
	data, _ := os.ReadFile(d.logPath)
	return string(data)
}

// cli runs the guestlink CLI against the daemon and returns its stdout; a
// non-zero exit fails the test with stderr.
func (d *daemonProc) cli(ctx context.Context, args ...string) string {
	d.t.Helper()
	out, errOut, err := d.runCLI(ctx, args...)
	if err != nil {
		d.t.Fatalf("guestlink %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// runCLI runs the guestlink CLI with GUESTLINK_STATE_DIR set.
func (d *daemonProc) runCLI(ctx context.Context, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink"), args...)
	cmd.Env = append(cleanEnv(), "GUESTLINK_STATE_DIR="+d.stateDir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// proc is a process found in /proc.
type proc struct {
	pid     int
	cmdline string
}

// procsUnder returns the processes (other than this one) whose command line
// or environment mentions dir: the daemon, its plugins, VMMs and agents.
func procsUnder(dir string) []proc {
	return findProcs(func(cmdline, environ string) bool {
		return strings.Contains(cmdline, dir) || strings.Contains(environ, dir)
	})
}

// findProcs returns the processes (other than this one) for which match
// reports true on their NUL-separated command line and environment.
func findProcs(match func(cmdline, environ string) bool) []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 { // gone, or a zombie
			continue
		}
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if match(string(cmdline), string(environ)) {
			out = append(out, proc{pid: pid, cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")})
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// guest is a launched sim instance.
type guest struct {
	name   string
	dir    string // the sim guest directory
	root   string // its stand-in root
	socket string // its /dev/lxd/sock
}

// agentDir is the config drive directory with the agent's certificate,
// key and agent.conf.
func (g *guest) agentDir() string { return filepath.Join(g.root, "run", "guestlink-agent") }

// launch creates and starts a sim instance running the real agent and
// waits until the agent is connected.
func (d *daemonProc) launch(ctx context.Context, name string, config map[string]string, devices map[string]map[string]string) *guest {
	d.t.Helper()
	cctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	if _, err := d.client.Create(cctx, api.InstancesPost{Name: name, Backend: "sim", Config: config, Devices: devices, Start: true}); err != nil {
		d.t.Fatalf("launching %s: %v", name, err)
	}
	inst := d.waitInstance(ctx, name, "agent connected", agentTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected
	})
	g := &guest{name: name, dir: inst.Details["guest_dir"], socket: inst.DevlxdSocket}
	if g.dir == "" || g.socket == "" {
		d.t.Fatalf("instance %s has no guest_dir or devlxd_socket: %+v", name, inst.Details)
	}
	g.root = filepath.Join(g.dir, "rootfs")
	return g
}

// waitInstance polls the instance until cond holds, failing the test with
// the last view after within.
func (d *daemonProc) waitInstance(ctx context.Context, name, what string, within time.Duration, cond func(*api.Instance) bool) *api.Instance {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *api.Instance
	var lastErr error
	for {
		inst, err := d.client.Instance(ctx, name)
		if err == nil {
			last = inst
			if cond(inst) {
				return inst
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				d.t.Fatalf("instance %s: %s not reached within %v: status %s, agent %q, config %v (last error %v)",
					name, what, within, last.Status, last.Agent.State, last.Config, lastErr)
			}
			d.t.Fatalf("instance %s: %s not reached within %v: %v", name, what, within, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// vmmPID returns the pid of the sim VMM of the guest directory dir.
func vmmPID(t *testing.T, dir string) int {
	t.Helper()
	ps := findProcs(func(cmdline, _ string) bool {
		return strings.HasSuffix(cmdline, "\x00vmm\x00"+dir+"\x00")
	})
	if len(ps) != 1 {
		t.Fatalf("want one VMM process for %s, found %v", dir, ps)
	}
	return ps[0].pid
}

// agentPIDs returns the guestlink-agent processes of a guest's root.
func agentPIDs(root string) []int {
	var pids []int
	for _, p := range findProcs(func(cmdline, environ string) bool {
		exe := strings.SplitN(cmdline, "\x00", 2)[0]
		return filepath.Base(exe) == "guestlink-agent" && strings.Contains("\x00"+environ, "\x00GUESTLINK_ROOT="+root+"\x00")
	}) {
		pids = append(pids, p.pid)
	}
	return pids
}

// agentCommand runs `guestlink-agent <args>` as software in the guest would,
// pointed at the guest's devlxd socket.
func agentCommand(ctx context.Context, t *testing.T, g *guest, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "guestlink-agent"), args...)
	cmd.Env = append(cleanEnv(), "GUESTLINK_DEVLXD_SOCKET="+g.socket)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("guestlink-agent %s in %s: %v: %s", strings.Join(args, " "), g.name, err, out)
	}
}

// recorder collects the lifecycle actions of one instance from the admin
// event stream.
type recorder struct {
	t    *testing.T
	name string

	mu      sync.Mutex
	events  []api.Event
	actions []string
	changed chan struct{}
	err     error
}

// record subscribes to the instance's lifecycle events until the test ends.
func (d *daemonProc) record(name string) *recorder { return d.recordSince(name, 0) }

// recordSince subscribes to the instance's lifecycle events after the event
// id since (0: from now on) until the test ends.
func (d *daemonProc) recordSince(name string, since int64) *recorder {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	evc, errc := d.client.Events(ctx, client.EventFilter{Types: []string{events.TypeLifecycle}, Instances: []string{name}, Since: since})
	r := &recorder{t: d.t, name: name, changed: make(chan struct{})}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for ev := range evc {
			var lc api.EventLifecycle
			if err := json.Unmarshal(ev.Metadata, &lc); err != nil {
				r.fail(fmt.Errorf("decoding lifecycle event %d: %w", ev.ID, err))
				continue
			}
			r.mu.Lock()
			if n := len(r.events); n > 0 && ev.ID <= r.events[n-1].ID {
				r.mu.Unlock()
				r.fail(fmt.Errorf("event id %d (%s) after id %d: ids must increase", ev.ID, lc.Action, r.events[n-1].ID))
				continue
			}
			r.events = append(r.events, ev)
			r.actions = append(r.actions, lc.Action)
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
		if err, ok := <-errc; ok && err != nil {
			r.fail(err)
		}
	}()
	d.t.Cleanup(func() {
		cancel()
		<-finished
	})
	return r
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// mark returns the number of actions seen so far, to count later ones.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.actions)
}

// lastID returns the id of the last event seen (0 if none).
func (r *recorder) lastID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return 0
	}
	return r.events[len(r.events)-1].ID
}

// since returns the actions after mark.
func (r *recorder) since(mark int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.actions[mark:]...)
}

// eventsSince returns the events after mark.
func (r *recorder) eventsSince(mark int) []api.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.Event(nil), r.events[mark:]...)
}

// wait waits until action has been seen n times after mark.
func (r *recorder) wait(ctx context.Context, mark int, action string, n int, within time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		r.mu.Lock()
		got := 0
		for _, a := range r.actions[mark:] {
			if a == action {
				got++
			}
		}
		err, changed, seen := r.err, r.changed, append([]string(nil), r.actions[mark:]...)
		r.mu.Unlock()
		if got >= n {
			return
		}
		if err != nil {
			r.t.Fatalf("event stream of %s failed: %v (seen %v)", r.name, err, seen)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			r.t.Fatalf("instance %s: %d %s event(s) not seen within %v; seen since mark: %v", r.name, n, action, within, seen)
		}
	}
}

// count returns how often action occurs in actions.
func count(actions []string, action string) int {
	n := 0
	for _, a := range actions {
		if a == action {
			n++
		}
	}
	return n
}

// devlxdAnswer is one answer of the guest's devlxd socket.
type devlxdAnswer struct {
	status      int
	contentType string
	body        []byte
}

// curlDevlxd sends one request to the guest's /dev/lxd/sock with curl and
// returns the answer byte for byte.
func curlDevlxd(ctx context.Context, t *testing.T, socket, method, path, body string) devlxdAnswer {
	t.Helper()
	bodyFile := filepath.Join(t.TempDir(), "body")
	args := []string{"-sS", "--max-time", "20", "--unix-socket", socket, "-X", method,
		"-o", bodyFile, "-w", "%{http_code}\n%{content_type}", "http://lxd" + path}
	if body != "" {
		args = append(args, "--data-binary", body)
	}
	out, err := exec.CommandContext(ctx, "curl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s %s: %v: %s", method, path, err, out)
	}
	code, ctype, _ := strings.Cut(string(out), "\n")
	status, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("curl %s %s: status %q: %v", method, path, code, err)
	}
	data, err := os.ReadFile(bodyFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return devlxdAnswer{status: status, contentType: ctype, body: data}
}

// agentConf is the part of a guest's agent.conf the link clients need.
type agentConf struct {
	Port        uint32 `json:"port"`
	Certificate string `json:"certificate"`
	Devlxd      bool   `json:"devlxd"`
}

// linkClient is an agent-side client of the daemon's devlxd handlers on one
// guest's hybrid link, presenting some guest's agent certificate.
type linkClient struct {
	socket string // <link.sock>_<port>
	tls    *tls.Config
}

// newLinkClient returns a client of the daemon over target's hybrid link
// presenting certOf's agent certificate, pinning the daemon certificate
// from target's agent.conf.
func newLinkClient(t *testing.T, target, certOf *guest) *linkClient {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(target.agentDir(), "agent.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var conf agentConf
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatalf("decoding %s's agent.conf: %v", target.name, err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certOf.agentDir(), "agent.crt"), filepath.Join(certOf.agentDir(), "agent.key"))
	if err != nil {
		t.Fatalf("loading %s's agent key pair: %v", certOf.name, err)
	}
	pinned := pemCert([]byte(conf.Certificate))
	if pinned == nil {
		t.Fatalf("%s's agent.conf has no daemon certificate", target.name)
	}
	return &linkClient{
		socket: filepath.Join(target.dir, "link.sock") + "_" + strconv.FormatUint(uint64(conf.Port), 10),
		tls: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, // pinned below, as the agent does
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !bytes.Equal(pinned, cs.PeerCertificates[0].Raw) {
					return errors.New("daemon certificate does not match agent.conf")
				}
				return nil
			},
		},
	}
}

// dial opens one TLS connection over the link.
func (l *linkClient) dial(ctx context.Context) (*tls.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "unix", l.socket)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", l.socket, err)
	}
	conn := tls.Client(raw, l.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake over %s: %w", l.socket, err)
	}
	return conn, nil
}

// envelope is the LXD envelope of a devlxd answer over the link.
type envelope struct {
	Type      string          `json:"type"`
	ErrorCode int             `json:"error_code"`
	Error     string          `json:"error"`
	Metadata  json.RawMessage `json:"metadata"`
}

// get sends GET path on conn and returns the HTTP status and envelope.
func linkGet(ctx context.Context, conn net.Conn, path string) (int, *envelope, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://guestlink"+path, nil)
	if err := req.Write(conn); err != nil {
		return 0, nil, fmt.Errorf("writing GET %s: %w", path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, nil, fmt.Errorf("reading answer to GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading body of GET %s: %w", path, err)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s answered %d %q: %w", path, resp.StatusCode, data, err)
	}
	return resp.StatusCode, &env, nil
}

// get dials, sends GET path and closes the connection.
func (l *linkClient) get(ctx context.Context, path string) (int, *envelope, error) {
	conn, err := l.dial(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	return linkGet(ctx, conn, path)
}

// pemCert returns the DER bytes of the first certificate in data (nil if
// there is none).
func pemCert(data []byte) []byte {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil
	}
	return b.Bytes
}
