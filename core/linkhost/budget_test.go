package linkhost

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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

// TestDescriptorReclaimed: links come before kept-alive connections. With
// MaxDescriptors 3, one listener and two connections held idle by their
// server (the devlxd server's kept connections, here a reclaim that closes
// the oldest), a third connection is accepted at once: the reclaim closes
// the oldest idle one for its descriptor. Tried as well: a reclaim with
// nothing idle (false) leaves the third waiting in the backlog until a
// connection is closed, and a new listener over the budget takes a kept
// connection's descriptor instead of going over it.
func TestDescriptorReclaimed(t *testing.T) {
	h := newHost(t, Config{MaxDescriptors: 3})
	var idle []net.Conn // the server's idle connections, oldest first
	var mu sync.Mutex
	h.SetReclaim(func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(idle) == 0 {
			return false
		}
		c := idle[0]
		idle = idle[1:]
		c.Close()
		return true
	})
	ep := attachHybrid(t, h, "uuid-a")
	path := hybrid.HostPath(ep.Path, h.Port())
	var guest []net.Conn
	defer func() {
		for _, c := range guest {
			c.Close()
		}
	}()
	dial := func() {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		guest = append(guest, c)
	}
	dial()
	first := acceptOne(t, h)
	dial()
	second := acceptOne(t, h)
	mu.Lock()
	idle = append(idle, first, second)
	mu.Unlock()
	dial()
	third := acceptOne(t, h)
	defer third.Close()
	if h.Reclaimed() != 1 {
		t.Fatalf("Reclaimed() = %d, want 1", h.Reclaimed())
	}
	// The oldest was closed for the third: its guest end reads EOF.
	if _, err := guest[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest idle connection was not closed")
	}
	if got := h.fds.inUse(); got != 3 {
		t.Fatalf("descriptors in use: %d, want 3", got)
	}
	// A second instance's listener over the budget takes second's
	// descriptor rather than going over it.
	attachHybrid(t, h, "uuid-b")
	if h.Reclaimed() != 2 {
		t.Fatalf("Reclaimed() after a listener over the budget = %d, want 2", h.Reclaimed())
	}
	testwait.For(t, "the reclaimed descriptor released", 10*time.Second, func() bool { return h.fds.inUse() == 3 })
	// Nothing idle now: a fourth waits in the backlog until third closes.
	dial()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := h.Accept(); err == nil {
			accepted <- c
		}
	}()
	third.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("a connection waiting for a descriptor was not accepted once one was released")
	}
}

// TestDetachClosesConnections: a detached link's open connections are
// closed (a kept-alive connection does not outlive its guest's link: the
// instance stopped or deleted), and only that link's.
func TestDetachClosesConnections(t *testing.T) {
	h := newHost(t, Config{})
	epA := attachHybrid(t, h, "uuid-a")
	epB := attachHybrid(t, h, "uuid-b")
	var guest []net.Conn
	defer func() {
		for _, c := range guest {
			c.Close()
		}
	}()
	accepted := map[string]net.Conn{}
	for _, ep := range []*contract.LinkEndpoint{epA, epB} {
		c, err := net.Dial("unix", hybrid.HostPath(ep.Path, h.Port()))
		if err != nil {
			t.Fatal(err)
		}
		guest = append(guest, c)
		ac := acceptOne(t, h)
		defer ac.Close()
		id, _ := IdentityOf(ac)
		accepted[id.InstanceUUID] = ac
	}
	h.Detach("uuid-a")
	if _, err := accepted["uuid-a"].Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection of the detached link is still open")
	}
	// B's still carries bytes both ways.
	if _, err := guest[1].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(accepted["uuid-b"], make([]byte, 1)); err != nil {
		t.Fatalf("the other link's connection: %v", err)
	}
}
