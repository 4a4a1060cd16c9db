package linkhost

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// TestDescriptorBudget: with MaxDescriptors 3 and one instance attached (its
// listener takes one), two connections are accepted; a third connects (the
// kernel queues it) but is accepted only once one of the two is closed; a
// detach gives every descriptor back.
func TestDescriptorBudget(t *testing.T) {
	h := newHost(t, Config{MaxDescriptors: 3})
	ep := attachHybrid(t, h, "uuid-a")
	path := hybrid.HostPath(ep.Path, h.Port())
	var guest []net.Conn
	defer func() {
		for _, c := range guest {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		guest = append(guest, c)
	}
	first, second := acceptOne(t, h), acceptOne(t, h)
	if got := h.fds.inUse(); got != 3 {
		t.Fatalf("descriptors in use: %d, want 3 (a listener, two connections)", got)
	}
	// The third is queued in the kernel, not accepted: the accept loop
	// waits for a descriptor.
	first.Close()
	third := acceptOne(t, h)
	if got := h.fds.inUse(); got != 3 {
		t.Fatalf("descriptors in use after a close and an accept: %d, want 3", got)
	}
	second.Close()
	third.Close()
	h.Detach("uuid-a")
	if got := h.fds.inUse(); got != 0 {
		t.Fatalf("descriptors in use after detach: %d, want 0", got)
	}
}

// TestDescriptorBudgetUnbounded: the zero value bounds nothing but counts.
func TestDescriptorBudgetUnbounded(t *testing.T) {
	b := newFDBudget(0)
	if b.bounded() || b.take() {
		t.Fatal("a zero budget is bounded")
	}
	stop := make(chan struct{})
	if !b.acquire(stop, stop) {
		t.Fatal("acquire on an unbounded budget failed")
	}
	b.release()
	b.release()
	if b.inUse() != 0 {
		t.Fatalf("in use %d, want 0", b.inUse())
	}
}

// TestGateIdleWaitsInPoller: an idle accept gate waits in the runtime's
// poller (goroutine state "IO wait"), not in a timed epoll_wait it wakes
// from to look at done (the gate polled every 200 ms: five wake-ups a
// second of an idle daemon). Parked there, it still accepts a connection
// made afterwards, and Close still ends it (TestMain's leak check).
func TestGateIdleWaitsInPoller(t *testing.T) {
	h := newHost(t, Config{MaxDescriptors: 8})
	ep := attachHybrid(t, h, "uuid-a")
	path := hybrid.HostPath(ep.Path, h.Port())
	for i := range 2 {
		// Tried: the first connection (the gate started waiting before
		// it), then one made once the gate is parked in the poller.
		testwait.For(t, "the accept gate parked in the runtime's poller", 10*time.Second, gateParked)
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		defer c.Close()
		acceptOne(t, h).Close()
	}
	testwait.For(t, "the accept gate parked again", 10*time.Second, gateParked)
}

// gateParked reports whether a goroutine waits in the runtime's poller in
// acceptGate.wait.
func gateParked() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "(*acceptGate).wait") {
			return true
		}
	}
	return false
}

// attachHybrid attaches a hybrid link for uuid at a socket path in a new
// temporary directory and returns its endpoint.
func attachHybrid(t *testing.T, h *Host, uuid string) *contract.LinkEndpoint {
	t.Helper()
	ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(t.TempDir(), "a", "link.sock")}
	if err := os.MkdirAll(filepath.Dir(ep.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach(uuid, ep); err != nil {
		t.Fatal(err)
	}
	return ep
}
