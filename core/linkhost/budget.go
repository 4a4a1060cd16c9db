package linkhost

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fdBudget bounds the descriptors a Host holds for hybrid links: each
// instance's listener and each link connection accepted on one. A
// connection waits in its listener's backlog (the kernel holds it, not the
// daemon) until a descriptor is free, so a burst of guests connecting at
// once never runs the daemon out of descriptors. A zero limit is no bound.
type fdBudget struct {
	mu    sync.Mutex
	limit int
	used  int
	freed chan struct{} // closed and replaced whenever one is released
	// reclaim closes one idle kept-alive connection and reports whether
	// there was one (nil: none to close). Links come before kept-alive
	// connections: when the budget is spent, it is asked to close one,
	// whose release frees a descriptor (Host.SetReclaim).
	reclaim atomic.Pointer[func() bool]
	// reclaimed counts the connections closed for a descriptor.
	reclaimed atomic.Uint64
}

func newFDBudget(limit int) *fdBudget {
	return &fdBudget{limit: max(limit, 0), freed: make(chan struct{})}
}

func (b *fdBudget) bounded() bool { return b.limit > 0 }

// take counts a descriptor whatever the limit (a listener: a running
// guest's link is always served). It reports whether the budget was
// already spent.
func (b *fdBudget) take() (over bool) {
	b.mu.Lock()
	b.used++
	over = b.bounded() && b.used > b.limit
	b.mu.Unlock()
	if over && b.reclaimOne() {
		over = false // a kept connection gives its descriptor back
	}
	return over
}

// reclaimOne asks the reclaim function to close an idle kept-alive
// connection and reports whether it did.
func (b *fdBudget) reclaimOne() bool {
	f := b.reclaim.Load()
	if f == nil || !(*f)() {
		return false
	}
	b.reclaimed.Add(1)
	return true
}

// acquire waits for a free descriptor and takes it; it reports false when
// stop or cancel was closed first (a nil one never is).
func (b *fdBudget) acquire(stop, cancel <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if !b.bounded() || b.used < b.limit {
			b.used++
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		// A kept connection closed releases its descriptor (freed).
		b.reclaimOne()
		select {
		case <-freed:
		case <-stop:
			return false
		case <-cancel:
			return false
		}
	}
}

// release gives a descriptor back.
func (b *fdBudget) release() {
	b.mu.Lock()
	b.used--
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// inUse returns how many descriptors are counted.
func (b *fdBudget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acceptGate accepts on every hybrid listener from one goroutine, only
// when a descriptor of the budget is free. One epoll instance watches the
// listeners (one-shot): when one has a connection queued, the gate takes a
// descriptor for it (waiting while none is free, so that every queued
// connection stays in the kernel's backlog), accepts once and watches the
// listener again. The listeners stay in the runtime's poller too (Accept
// is Go's); no goroutine per listener waits in Accept.
//
// The epoll instance itself waits in the runtime's poller (an epoll
// descriptor is readable while one of its listeners is ready), so an idle
// gate holds no thread and never wakes: no timeout to look at done, whose
// closing sets a past read deadline that ends the wait.
type acceptGate struct {
	fds    *fdBudget
	epfd   int
	file   *os.File        // epfd, in the runtime's poller
	rc     syscall.RawConn // file's, to wait for readiness
	done   chan struct{}
	log    func(msg string, args ...any)
	accept func(*gatedListener)

	mu      sync.Mutex
	entries map[int32]*gatedListener // by listener descriptor
}

func newAcceptGate(fds *fdBudget, done chan struct{}, log func(string, ...any), accept func(*gatedListener)) (*acceptGate, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating the link accept gate: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("creating the link accept gate: %w", err)
	}
	// A non-blocking descriptor joins the runtime's poller; one that could
	// not has no deadlines (os.ErrNoDeadline), and no way to wake the wait.
	file := os.NewFile(uintptr(epfd), "link accept gate")
	if err := file.SetReadDeadline(time.Time{}); err != nil {
		file.Close()
		return nil, fmt.Errorf("creating the link accept gate: epoll descriptor not pollable: %w", err)
	}
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("creating the link accept gate: %w", err)
	}
	return &acceptGate{fds: fds, epfd: epfd, file: file, rc: rc, done: done, log: log, accept: accept, entries: map[int32]*gatedListener{}}, nil
}

// register watches g's listener and returns its descriptor.
func (g *acceptGate) register(gl *gatedListener) (int32, error) {
	sc, ok := gl.ln.(syscall.Conn)
	if !ok {
		return 0, errors.New("link listener has no descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("link listener descriptor: %w", err)
	}
	fd := int32(-1)
	if err := rc.Control(func(f uintptr) { fd = int32(f) }); err != nil {
		return 0, fmt.Errorf("link listener descriptor: %w", err)
	}
	gl.fd = fd
	g.mu.Lock()
	g.entries[fd] = gl
	g.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: fd}
	if err := unix.EpollCtl(g.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
		g.unregister(fd)
		return 0, fmt.Errorf("watching link listener: %w", err)
	}
	return fd, nil
}

// rearm watches fd again after an accept.
func (g *acceptGate) rearm(fd int32) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: fd}
	_ = unix.EpollCtl(g.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev) // gone once detached
}

// unregister stops watching fd; call it before closing the listener (its
// number may be reused).
func (g *acceptGate) unregister(fd int32) {
	_ = unix.EpollCtl(g.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	g.mu.Lock()
	delete(g.entries, fd)
	g.mu.Unlock()
}

// wait returns the ready listeners' events, waiting in the runtime's
// poller while there is none (the poll itself never blocks).
func (g *acceptGate) wait(events []unix.EpollEvent) (int, error) {
	for {
		var n int
		var werr error
		err := g.rc.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events, 0)
			return n > 0 || werr != nil
		})
		switch {
		case err != nil:
			return 0, err
		case errors.Is(werr, unix.EINTR):
			continue
		case werr != nil:
			return 0, werr
		}
		return n, nil
	}
}

// close frees the epoll instance once run returned and every listener was
// unregistered.
func (g *acceptGate) close() { g.file.Close() }

// run accepts until done is closed. It waits in the runtime's poller for a
// listener to be ready, so it costs nothing while no guest connects.
func (g *acceptGate) run() {
	ran := make(chan struct{})
	defer close(ran)
	go func() {
		select {
		case <-g.done:
			_ = g.file.SetReadDeadline(time.Unix(1, 0)) // ends the wait below
		case <-ran:
		}
	}()
	events := make([]unix.EpollEvent, 256)
	for {
		select {
		case <-g.done:
			return
		default:
		}
		n, err := g.wait(events)
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			g.log("linkhost: link accept gate failed; hybrid links no longer accept", "err", err)
			return
		}
		for _, ev := range events[:n] {
			g.mu.Lock()
			gl := g.entries[ev.Fd]
			g.mu.Unlock()
			if gl == nil {
				continue
			}
			if !g.fds.acquire(g.done, nil) {
				return
			}
			g.accept(gl)
		}
	}
}
