package linkhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// scriptedListener is a fake listener whose Accept first fails with each of
// errs in turn, then returns the connections fed to it.
type scriptedListener struct {
	*chanListener
	mu    sync.Mutex
	errs  []error
	calls int
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls++
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.chanListener.Accept()
}

// scriptedSerial opens sessions whose Accept is a scriptedListener with the
// errors of the next entry of errs.
type scriptedSerial struct {
	mu       sync.Mutex
	errs     [][]error
	sessions []*scriptedListener
}

func (f *scriptedSerial) Open(context.Context, string) (SerialSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	if len(f.errs) > 0 {
		errs, f.errs = f.errs[0], f.errs[1:]
	}
	l := &scriptedListener{chanListener: newChanListener(), errs: errs}
	f.sessions = append(f.sessions, l)
	return scriptedSession{l}, nil
}

func (f *scriptedSerial) session(i int) *scriptedListener {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.sessions) {
		return nil
	}
	return f.sessions[i]
}

type scriptedSession struct{ l *scriptedListener }

func (s scriptedSession) Accept() (net.Conn, error) { return s.l.Accept() }
func (s scriptedSession) Dial(context.Context, uint32) (net.Conn, error) {
	return nil, errors.New("not dialable")
}
func (s scriptedSession) Close() error { return s.l.Close() }

func emfile() error {
	return &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// feed sends a new connection into l and returns the guest's end.
func feed(t *testing.T, l *chanListener, wrap func(net.Conn) net.Conn) net.Conn {
	t.Helper()
	host, guest := net.Pipe()
	t.Cleanup(func() { guest.Close() })
	var c net.Conn = host
	if wrap != nil {
		c = wrap(host)
	}
	select {
	case l.ch <- c:
	case <-time.After(20 * time.Second):
		t.Fatal("the link does not accept any more")
	}
	return guest
}

// closedByHost reports whether the host closed the guest's end c.
func closedByHost(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// TestAcceptSurvivesTemporaryErrors checks that EMFILE-like errors do not end
// a link's accept loop or the vsock listener's.
func TestAcceptSurvivesTemporaryErrors(t *testing.T) {
	errs := []error{emfile(), emfile(), os.NewSyscallError("accept4", syscall.ENFILE), emfile()}
	t.Run("serial", func(t *testing.T) {
		fs := &scriptedSerial{errs: [][]error{errs}}
		h := newHost(t, Config{Serial: fs})
		if err := h.Attach("uuid-s", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/s"}); err != nil {
			t.Fatal(err)
		}
		feed(t, fs.session(0).chanListener, nil)
		if got := acceptOne(t, h); got.Identity.InstanceUUID != "uuid-s" {
			t.Fatalf("identity %+v", got.Identity)
		}
	})
	t.Run("vsock", func(t *testing.T) {
		dev := filepath.Join(t.TempDir(), "vhost-vsock")
		if err := os.WriteFile(dev, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ln := &scriptedListener{chanListener: newChanListener(), errs: errs}
		h := newHost(t, Config{VsockDevice: dev, ListenVsock: func(uint32) (net.Listener, error) { return ln, nil }})
		if err := h.Attach("uuid-7", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 7}); err != nil {
			t.Fatal(err)
		}
		feed(t, ln.chanListener, func(c net.Conn) net.Conn { return cidConn{c, 7} })
		if got := acceptOne(t, h); got.Identity.InstanceUUID != "uuid-7" {
			t.Fatalf("identity %+v", got.Identity)
		}
	})
}

// TestReattachRevivesFailedLink checks that attaching again with the same
// endpoint re-creates a link whose accept loop stopped on an error, and
// leaves a working one alone.
func TestReattachRevivesFailedLink(t *testing.T) {
	fs := &scriptedSerial{errs: [][]error{{errors.New("session broken")}}}
	h := newHost(t, Config{Serial: fs})
	ep := &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/s"}
	if err := h.Attach("uuid-s", ep); err != nil {
		t.Fatal(err)
	}
	// Wait until the first session's loop met its error.
	testwait.For(t, "the accept loop to stop on the session error", 20*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.attached["uuid-s"].dead()
	})
	if err := h.Attach("uuid-s", ep); err != nil {
		t.Fatal(err)
	}
	s := fs.session(1)
	if s == nil {
		t.Fatal("re-attaching a failed link did not re-create it")
	}
	feed(t, s.chanListener, nil)
	acceptOne(t, h)
	if err := h.Attach("uuid-s", ep); err != nil {
		t.Fatal(err)
	}
	if fs.session(2) != nil {
		t.Fatal("re-attaching a working link re-created it")
	}
}

// TestConnectionCapPerInstance checks that an instance cannot hold more than
// MaxConnsPerInstance link connections, that closing one frees its place,
// and that other instances are not affected.
func TestConnectionCapPerInstance(t *testing.T) {
	const max = 3
	fs := &scriptedSerial{}
	obs := &connRecorder{}
	h := newHost(t, Config{Serial: fs, MaxConnsPerInstance: max, Observer: obs})
	for i, u := range []string{"uuid-a", "uuid-b"} {
		if err := h.Attach(u, &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: fmt.Sprint("/s", i)}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := fs.session(0).chanListener, fs.session(1).chanListener
	var held []*Conn
	for range max {
		feed(t, a, nil)
		held = append(held, acceptOne(t, h))
	}
	for i := range 2 {
		if g := feed(t, a, nil); !closedByHost(g) {
			t.Fatalf("connection %d over the cap was not closed", max+1+i)
		}
	}
	feed(t, b, nil)
	if got := acceptOne(t, h); got.Identity.InstanceUUID != "uuid-b" {
		t.Fatalf("other instance: identity %+v", got.Identity)
	}
	held[0].Close()
	held[0].Close() // a second Close must not free a second place
	feed(t, a, nil)
	acceptOne(t, h)
	if g := feed(t, a, nil); !closedByHost(g) {
		t.Fatal("a connection over the cap was accepted after one was closed twice")
	}
	// The observer saw each connection before it was handed on or closed.
	if got := obs.counts(); got != (connCounts{admitted: max + 2, refused: 3}) {
		t.Fatalf("observer counted %+v, want %d admitted and 3 refused", got, max+2)
	}
}

type connCounts struct{ admitted, refused int }

// connRecorder counts ConnObserver calls of serial links.
type connRecorder struct {
	mu sync.Mutex
	c  connCounts
}

func (r *connRecorder) LinkConn(link string, admitted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if link != string(contract.LinkSerial) {
		panic("link kind " + link)
	}
	if admitted {
		r.c.admitted++
	} else {
		r.c.refused++
	}
}

func (r *connRecorder) counts() connCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

var _ ConnObserver = (*connRecorder)(nil)

func TestDefaultConnectionCap(t *testing.T) {
	h := newHost(t, Config{})
	if h.cfg.MaxConnsPerInstance != DefaultMaxConnsPerInstance || DefaultMaxConnsPerInstance < 1000 {
		t.Fatalf("cap %d, want the default %d (at least the 1,000 connections a guest may hold)", h.cfg.MaxConnsPerInstance, DefaultMaxConnsPerInstance)
	}
}
