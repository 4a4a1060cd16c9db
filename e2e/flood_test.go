package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/listener"
	"github.com/guestlink/guestlink/internal/testwait"
)

// floodFiles is the open-file limit of the flooded daemons: the one the
// report reproduced the crash with (485 idle connections sufficed).
const floodFiles = 512

// floodConns is how many idle connections a flood opens: well past
// floodFiles.
const floodConns = 1000

var (
	limitsLine = regexp.MustCompile(`msg="TCP connection limits" max_conns=(\d+) max_per_peer=(\d+)`)
	backoffLog = regexp.MustCompile(`time=(\S+) level=\w+ msg="(accept failing, backing off|accepting again)" component=listener listener=http .*errors=(\d+)`)
)

// httpAddr returns the host:port of the daemon's --http listener, from its
// login URL line.
func httpAddr(t *testing.T, d *daemonProc) string {
	t.Helper()
	if !waitFor(t, d, 1) {
		t.Fatalf("no start line in the log:\n%s", d.logTail(logTailLines))
	}
	m := loginLine.FindStringSubmatch(d.log())
	if m == nil {
		t.Fatalf("no login URL in the log:\n%s", d.logTail(logTailLines))
	}
	return strings.TrimPrefix(m[1][:strings.Index(m[1], "/login")], "http://")
}

// flood is a set of idle TCP connections: each sends nothing, and a
// goroutine per connection notices when the daemon closes it.
type flood struct {
	conns  []net.Conn
	closed atomic.Int64 // connections the daemon closed
}

// openFlood opens n idle connections to addr. The kernel completes each
// connect whether or not the daemon accepts it (the listen backlog).
func openFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	f := &flood{}
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, opTimeout)
		if err != nil {
			f.close()
			t.Fatalf("connection %d of the flood: %v", i, err)
		}
		f.conns = append(f.conns, c)
		go func() {
			var b [1]byte
			_, _ = c.Read(b[:]) // EOF or a reset: the daemon closed it (or the test did)
			f.closed.Add(1)
		}()
	}
	t.Cleanup(f.close)
	return f
}

func (f *flood) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

// declareReady has the guest declare Ready through its devlxd socket, as
// software in the guest would, and waits until the daemon records it.
func declareReady(ctx context.Context, t *testing.T, d *daemonProc, g *guest) {
	t.Helper()
	if a := curlDevlxd(ctx, t, g.socket, "PATCH", "/1.0", `{"state":"Ready"}`); a.status != http.StatusOK {
		t.Fatalf("devlxd PATCH /1.0 Ready during the flood: %d %s", a.status, a.body)
	}
	d.waitInstance(ctx, g.name, "Ready recorded", opTimeout, func(i *api.Instance) bool { return i.Status == "Ready" })
}

// TestConnectionFlood opens 1,000 idle TCP connections to --http of a
// daemon limited to 512 open files, as the report did with 485 (the daemon
// then stopped on "accept4: too many open files"). Within its TCP budget
// the daemon closes the connections over the caps at once; with the caps
// lifted past its limit it runs out of descriptors, backs off, logs that
// once per interval and goes on. Either way, throughout the flood the
// admin socket answers, a guest declares Ready through devlxd and the
// daemon records it, and the daemon is alive at the end.
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	t.Run("within the TCP budget", func(t *testing.T) {
		t.Parallel()
		// The first-request deadline is far: every connection the daemon
		// closes during the test was closed for a cap.
		d := newDaemonNofile(t, floodFiles, "--http", "127.0.0.1:0", "--http-first-request-timeout", "10m")
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		addr := httpAddr(t, d)
		m := limitsLine.FindStringSubmatch(d.log())
		if m == nil {
			t.Fatalf("no TCP limits line in the log:\n%s", d.logTail(logTailLines))
		}
		maxConns, _ := strconv.Atoi(m[1])
		perPeer, _ := strconv.Atoi(m[2])
		// The budget is what the links leave of 512 files, halved: far
		// below the limit.
		if maxConns <= 0 || maxConns >= floodFiles/2 || perPeer <= 0 || perPeer > maxConns {
			t.Fatalf("TCP limits %d in all, %d per peer at %d open files", maxConns, perPeer, floodFiles)
		}
		g := d.launch(ctx, "flood1", nil, nil)
		fdsBefore := openFiles(t, d.pid())

		f := openFlood(t, addr, floodConns)
		// All from 127.0.0.1: past the per-peer cap each is closed at
		// accept, not queued.
		testwait.For(t, "the connections over the per-peer cap closed", opTimeout, func() bool {
			return f.closed.Load() >= int64(floodConns-perPeer)
		})
		if open := openFiles(t, d.pid()); open > fdsBefore+perPeer+16 {
			t.Errorf("the daemon holds %d files with the flood (%d before, cap %d)", open, fdsBefore, perPeer)
		}
		// Throughout the flood: the admin socket, devlxd, the store.
		if _, err := d.client.ServerInfo(ctx); err != nil {
			t.Fatalf("admin socket during the flood: %v", err)
		}
		declareReady(ctx, t, d, g)
		if got := f.closed.Load(); got != int64(floodConns-perPeer) {
			t.Errorf("%d flood connections closed, want %d (all but the per-peer cap of %d)", got, floodConns-perPeer, perPeer)
		}
		if !d.running() {
			t.Fatal("the daemon died during the flood")
		}
		log := d.log()
		if strings.Contains(log, "too many open files") || strings.Contains(log, "daemon stopping") {
			t.Errorf("the daemon reached its open-file limit or stopped:\n%s", d.logTail(logTailLines))
		}
		if !strings.Contains(log, `msg="connections over the limit closed at accept" component=listener listener=http`) {
			t.Errorf("the refusals were not logged:\n%s", d.logTail(logTailLines))
		}
		// Once the flood goes, TCP clients are served again.
		f.close()
		testwait.For(t, "the flood's places given back", opTimeout, func() bool { return openFiles(t, d.pid()) <= fdsBefore+4 })
		resp, err := http.Get("http://" + addr + "/1.0")
		if err != nil {
			t.Fatalf("GET /1.0 over TCP after the flood: %v", err)
		}
		resp.Body.Close()
	})

	t.Run("past the open-file limit", func(t *testing.T) {
		t.Parallel()
		// The caps are lifted above the limit (a misconfiguration): the
		// daemon runs out of descriptors. Idle connections are closed 3 s
		// after they are accepted, which lets the queued ones in.
		d := newDaemonNofile(t, floodFiles, "--http", "127.0.0.1:0", "--http-max-conns", "100000",
			"--http-max-conns-per-peer", "100000", "--http-first-request-timeout", "3s")
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		addr := httpAddr(t, d)
		g := d.launch(ctx, "flood2", nil, nil)

		f := openFlood(t, addr, floodConns)
		testwait.For(t, "the daemon out of descriptors, backing off", opTimeout, func() bool {
			return strings.Contains(d.log(), `msg="accept failing, backing off" component=listener listener=http`)
		})
		if !strings.Contains(d.log(), "too many open files") {
			t.Errorf("the back-off line names no EMFILE:\n%s", d.logTail(logTailLines))
		}
		if _, err := d.client.ServerInfo(ctx); err != nil {
			t.Fatalf("admin socket during the flood: %v", err)
		}
		declareReady(ctx, t, d, g)
		// The daemon ends every flood connection: those it accepted at
		// their first-request deadline, the queued ones after it.
		testwait.For(t, "every flood connection closed by the daemon", 2*time.Minute, func() bool {
			return f.closed.Load() == floodConns
		})
		if !d.running() {
			t.Fatal("the daemon died during the flood")
		}
		if strings.Contains(d.log(), "daemon stopping") {
			t.Fatalf("the daemon stopped:\n%s", d.logTail(logTailLines))
		}
		// The errors after the first line are counted in the next, which
		// comes one interval later at the most.
		testwait.For(t, "a second line about the back-off", listener.DefaultLogInterval+opTimeout, func() bool {
			return len(backoffLog.FindAllString(d.log(), -1)) >= 2
		})
		lines := backoffLog.FindAllStringSubmatch(d.log(), -1)
		errs := 0
		var last time.Time
		for i, l := range lines {
			at, err := time.Parse(time.RFC3339Nano, l[1])
			if err != nil {
				t.Fatalf("back-off line %d: time %q: %v", i, l[1], err)
			}
			// Times are logged to the millisecond.
			if i > 0 && at.Sub(last) < listener.DefaultLogInterval-time.Millisecond {
				t.Errorf("back-off lines %v apart, want one per %v at most:\n%s", at.Sub(last), listener.DefaultLogInterval, l[0])
			}
			last = at
			n, _ := strconv.Atoi(l[3])
			errs += n
		}
		t.Logf("%d accept errors in %d log lines", errs, len(lines))
		if errs <= len(lines) {
			t.Errorf("%d accept errors in %d lines: want several errors per line, not one line per error", errs, len(lines))
		}
		// Once the flood is gone, TCP clients are served again.
		f.close()
		resp, err := http.Get("http://" + addr + "/1.0")
		if err != nil {
			t.Fatalf("GET /1.0 over TCP after the flood: %v", err)
		}
		resp.Body.Close()
	})
}

// rss returns the resident set size of process pid in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestSlowReaders sends, round after round, clients that ask the TCP
// listener for a large instance list and never read it, as the report's
// 40 clients did (they held 284 MB for over 75 s). The daemon drops each
// after its write timeout, and its memory stays bounded: below what a few
// rounds would hold if it kept them.
func TestSlowReaders(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--http", "127.0.0.1:0", "--write-timeout", "2s")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	addr := httpAddr(t, d)
	d.cli(ctx, "auth", "identity", "create", "bearer/slow")
	token := strings.TrimSpace(d.cli(ctx, "auth", "identity", "token", "issue", "bearer/slow"))

	// 56 instances with 4 values of 60 KiB each (an instance's
	// configuration is at most 256 KiB): a list of about 13 MiB, more than
	// the kernel's socket buffers take.
	config := map[string]string{}
	for k := range 4 {
		config[fmt.Sprintf("user.blob%d", k)] = strings.Repeat("x", 60<<10)
	}
	for i := range 56 {
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: fmt.Sprintf("big%d", i), Backend: "sim", Config: config}); err != nil {
			t.Fatal(err)
		}
	}
	request := "GET /1.0/instances?recursion=1 HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + token + "\r\n\r\n"
	// A client that reads gets all of it.
	size := func() int64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /1.0/instances: %d, %d bytes, %v", resp.StatusCode, n, err)
		}
		return n
	}()
	if size < 12<<20 {
		t.Fatalf("the list is %d bytes, want at least 12 MiB", size)
	}

	const rounds, perRound = 8, 5
	pid := d.pid()
	base, peak := rss(t, pid), int64(0)
	for r := range rounds {
		var conns []net.Conn
		for range perRound {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := io.WriteString(c, request); err != nil {
				t.Fatal(err)
			}
		}
		// Never read: the daemon's writes block, holding the answers,
		// and it drops the clients after the write timeout (without one
		// it would hold them until they read).
		// Never read: the daemon's writes block, holding the answers,
		// and it drops the clients after the write timeout (without one
		// it would hold them until they read). Its side of a dropped
		// connection leaves ESTABLISHED (its FIN waits behind the unread
		// data).
		testwait.For(t, fmt.Sprintf("round %d's clients dropped", r), opTimeout, func() bool {
			peak = max(peak, rss(t, pid))
			for _, c := range conns {
				if established(t, c) {
					return false
				}
			}
			return true
		})
		for _, c := range conns {
			c.Close()
		}
	}
	peak = max(peak, rss(t, pid))
	// Kept, the rounds' answers would take rounds*perRound*size (about
	// 560 MiB, less what the kernel buffers); dropped, one round's at a
	// time, twice over for the garbage collector.
	bound := 4 * perRound * size
	t.Logf("RSS %d MiB before, %d MiB at the peak; list %d MiB, %d slow clients in %d rounds", base>>20, peak>>20, size>>20, rounds*perRound, rounds)
	if peak-base > bound {
		t.Errorf("RSS grew by %d MiB with slow readers, want at most %d MiB", (peak-base)>>20, bound>>20)
	}
	if _, err := d.client.ServerInfo(ctx); err != nil {
		t.Fatalf("admin socket after the slow readers: %v", err)
	}
}

// established reports whether the daemon's side of the client connection
// c (over IPv4 loopback) is still ESTABLISHED, from /proc/net/tcp.
func established(t *testing.T, c net.Conn) bool {
	t.Helper()
	local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's side: local address its port, remote address ours.
	self, peer := fmt.Sprintf(":%04X ", remote.Port), fmt.Sprintf(":%04X ", local.Port)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[1]+" ", self) || !strings.HasSuffix(f[2]+" ", peer) {
			continue
		}
		return f[3] == "01" // TCP_ESTABLISHED
	}
	return false
}
