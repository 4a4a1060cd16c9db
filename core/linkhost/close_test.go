package linkhost

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// openDescriptors counts the test process's open file descriptors.
func openDescriptors(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestCloseReleasesEveryLink attaches many hybrid links, each with a guest
// connection handed on (as an agent's to devlxd, kept by its server) and
// one still waiting in its listener's backlog, then closes the Host, as the
// daemon's stop does: every guest connection must see its link end (EOF,
// the one in a backlog too), every socket file must be gone from the
// guests' directories, the descriptors the links held must be released
// (the process holds what it held before the first Attach) and no
// goroutine of the links may be left (the package's TestMain checks with
// leakcheck). Tried with the accept gate (the daemon's default) and with a
// bound on the descriptors (MaxDescriptors, as the daemon derives it).
func TestCloseReleasesEveryLink(t *testing.T) {
	const n = 200
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"unbounded", Config{MaxDescriptors: -1}},
		{"descriptor bound", Config{MaxDescriptors: 4 * n}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			before := openDescriptors(t)
			cfg := tt.cfg
			cfg.DisableVsock = true
			h, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var guests, waiting []net.Conn
			var handed []net.Conn
			for i := range n {
				ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(dir, fmt.Sprint(i), "link.sock")}
				if err := os.MkdirAll(filepath.Dir(ep.Path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := h.Attach(fmt.Sprintf("uuid-%d", i), ep); err != nil {
					t.Fatal(err)
				}
				c, err := net.Dial("unix", hybrid.HostPath(ep.Path, h.Port()))
				if err != nil {
					t.Fatal(err)
				}
				guests = append(guests, c)
				handed = append(handed, acceptOne(t, h))
				// A second connection, not accepted by anyone: it waits
				// in the backlog or in the hand-off to Accept.
				w, err := net.Dial("unix", hybrid.HostPath(ep.Path, h.Port()))
				if err != nil {
					t.Fatal(err)
				}
				waiting = append(waiting, w)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			for i, c := range append(guests, waiting...) {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				// EOF for a connection accepted, a reset for one
				// its closed listener never accepted.
				if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("guest connection %d read after Close: %v, want EOF or a reset (its link ended)", i, err)
				}
				c.Close()
			}
			for i := range n {
				entries, err := os.ReadDir(filepath.Join(dir, fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 0 {
					t.Fatalf("left in guest %d's directory after Close: %v", i, entries)
				}
			}
			// The connections handed on were closed by Close (their
			// owner's Close after it does nothing more).
			for _, c := range handed {
				c.Close()
			}
			if got := h.fds.inUse(); got != 0 {
				t.Fatalf("%d link descriptors still counted after Close", got)
			}
			if after := openDescriptors(t); after != before {
				t.Fatalf("%d descriptors open after Close, %d before the first Attach", after, before)
			}
		})
	}
}
