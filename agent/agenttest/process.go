package agenttest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testbin"

	"github.com/guestlink/guestlink/link/ringproto"
)

// BuildAgent returns the path of an up-to-date cmd/guestlink-agent binary
// (CGO_ENABLED=0), built at most once per content by internal/testbin. The
// file is shared: do not change it.
func BuildAgent() (string, error) {
	return testbin.Path(testbin.Agent)
}

// Guest is a stand-in guest root for an agent process: <Root>/dev/...,
// the config dir with certificates, and the VMM socket of a hybrid link.
type Guest struct {
	// Root is the guest root.
	Root string
	// UDS is the VMM socket of the hybrid link.
	UDS string
	// Certs is the instance's material.
	Certs *Certs
}

// NewGuest prepares a guest root in a fresh temporary directory with the
// config dir written and a boot id.
func NewGuest(t testing.TB) *Guest {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: keep the root short.
	root, err := os.MkdirTemp("", "gla")
	if err != nil {
		t.Fatalf("creating guest root: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	g := &Guest{Root: root, UDS: filepath.Join(root, "vm.sock"), Certs: NewCerts(t)}
	g.Certs.WriteConfigDir(t, filepath.Join(root, "run/guestlink-agent"))
	for _, d := range []string{"dev/virtio-ports", "proc/sys/kernel/random"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatalf("creating %s: %v", d, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), []byte("boot-1\n"), 0o644); err != nil {
		t.Fatalf("writing boot id: %v", err)
	}
	return g
}

// Socket returns the guest's devlxd socket path.
func (g *Guest) Socket() string { return filepath.Join(g.Root, "dev/lxd/sock") }

// WriteAgentConf writes agent.conf into the config dir.
func (g *Guest) WriteAgentConf(t testing.TB, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.Root, "run/guestlink-agent/agent.conf"), data, 0o600); err != nil {
		t.Fatalf("writing agent.conf: %v", err)
	}
}

// Process is a running agent process.
type Process struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	waited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartAgent runs "bin run --root <root> --link hybrid:<uds> args..." and
// stops it (SIGTERM, then SIGKILL) at cleanup. Its log is printed when the
// test failed.
func StartAgent(t testing.TB, bin string, g *Guest, args ...string) *Process {
	t.Helper()
	full := append([]string{"run", "--root", g.Root, "--link", "hybrid:" + g.UDS}, args...)
	cmd := exec.Command(bin, full...)
	cmd.Env = append(os.Environ(), "GUESTLINK_AGENT_DEBUG=1")
	p := &Process{cmd: cmd, out: &syncBuffer{}, waited: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting agent: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.waited)
	}()
	t.Cleanup(func() {
		_, _ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("agent log:\n%s", p.Log())
		}
	})
	return p
}

// Log returns what the agent wrote so far.
func (p *Process) Log() string { return p.out.String() }

// Stop sends SIGTERM and waits up to timeout for the exit (SIGKILL after).
// It reports whether the process exited by itself, and its exit error.
func (p *Process) Stop(timeout time.Duration) (exited bool, err error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.waited:
		return true, p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.waited
		return false, p.err
	}
}

// Ring reads the words the agent writes to a ring port, stood in by a FIFO
// that the reader holds open read-write (so the port always has a reader).
type Ring struct {
	f     *os.File
	mu    sync.Mutex
	cond  *sync.Cond
	words []ringproto.Word
	done  bool
}

// OpenRing creates the FIFO <root>/dev/virtio-ports/<name> and reads it.
func OpenRing(t testing.TB, g *Guest, name string) *Ring {
	t.Helper()
	path := filepath.Join(g.Root, "dev/virtio-ports", name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("creating ring FIFO: %v", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening ring FIFO: %v", err)
	}
	r := &Ring{f: f}
	r.cond = sync.NewCond(&r.mu)
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			r.mu.Lock()
			r.words = append(r.words, ringproto.Word(sc.Text()))
			r.cond.Broadcast()
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.done = true
		r.cond.Broadcast()
		r.mu.Unlock()
	}()
	t.Cleanup(func() { f.Close() })
	return r
}

// Words returns every line read so far.
func (r *Ring) Words() []ringproto.Word {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ringproto.Word(nil), r.words...)
}

// WaitFor waits until the line at index >= from equals w and returns the
// index after it.
func (r *Ring) WaitFor(t testing.TB, from int, w ringproto.Word, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for i := from; i < len(r.words); i++ {
			if r.words[i] == w {
				return i + 1
			}
		}
		if r.done || !time.Now().Before(deadline) {
			t.Fatalf("ring: no %s after index %d within %s; lines: %q", w, from, timeout, r.words)
		}
		r.cond.Wait()
	}
}

// Latency collects per-operation durations and reports their median and
// 99th percentile with b.ReportMetric ("median-µs", "p99-µs").
type Latency struct {
	d []time.Duration
}

// Time runs op once and records its duration.
func (l *Latency) Time(op func() error) error {
	start := time.Now()
	err := op()
	l.d = append(l.d, time.Since(start))
	return err
}

// Report adds the metrics to b.
func (l *Latency) Report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	median := s[len(s)/2]
	p99 := s[min(len(s)-1, len(s)*99/100)]
	b.ReportMetric(float64(median.Nanoseconds())/1e3, "median-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
}
