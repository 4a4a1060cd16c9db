package e2e

import (
	"bufio"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/internal/testwait"
)

// TestStopDoesNotWaitOnStalledRequests stops a real daemon while a client
// of its admin socket has sent half a request and stalls (a hung client,
// a CLI stopped mid-write). The admin API reads a request for up to a
// minute, so the stop used to wait for it until its own 20 s bound; now
// each HTTP server's requests in flight get a grace of 1 s, after which
// the stop goes on and says so in the log ("requests still in flight",
// server=api), and its "guestlinkd stopped" line names the api step.
func TestStopDoesNotWaitOnStalledRequests(t *testing.T) {
	d := newDaemon(t)
	c, err := net.Dial("unix", filepath.Join(d.stateDir, "guestlink.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A first request answered: the connection is served (accepted and
	// read), not waiting in the listener's backlog.
	if _, err := c.Write([]byte("GET /1.0 HTTP/1.1\r\nHost: guestlink\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Half of the next one, and the server reads it: it then waits for
	// the rest of the headers (until its read timeout, a minute).
	if _, err := c.Write([]byte("GET /1.0 HTTP/1.1\r\nHo")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the daemon to read the half request", 30*time.Second, func() bool {
		return unreadBytes(t, c.(*net.UnixConn)) == 0
	})
	start := time.Now()
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	log := d.log()
	if !strings.Contains(log, `msg="stopping: requests still in flight" server=api`) {
		t.Errorf("the stop did not log the admin API's request in flight; log:\n%s", d.logTail(logTailLines))
	}
	var stopped string
	for line := range strings.Lines(log) {
		if strings.Contains(line, `msg="guestlinkd stopped"`) {
			stopped = line
		}
	}
	if !strings.Contains(stopped, " api=") {
		t.Errorf("the stop's line does not name the api step: %q", stopped)
	}
	// The grace is 1 s; the rest of a daemon's stop without guests well
	// under a second. The stop waited 20 s before.
	if took > 10*time.Second {
		t.Errorf("the daemon stopped %v after SIGTERM with a stalled request: it waited for the request", took)
	}
	t.Logf("stopped %v after SIGTERM; %s", took.Round(time.Millisecond), strings.TrimSpace(stopped))
}

// unreadBytes is how many bytes written on c its peer has not read yet
// (SIOCOUTQ: a Unix socket's sent data is held until the peer reads it).
func unreadBytes(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("SIOCOUTQ: %v", ierr)
	}
	return n
}
