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

	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/core/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func newHost(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.VsockDevice == "" && cfg.ListenVsock == nil {
		cfg.DisableVsock = true
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// acceptOne accepts one connection from h within a generous timeout.
func acceptOne(t *testing.T, h *Host) *Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := h.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		c, ok := r.c.(*Conn)
		if !ok {
			t.Fatalf("Accept returned %T, want *Conn", r.c)
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no connection accepted")
	}
	return nil
}

func TestPortRangeWithoutVsock(t *testing.T) {
	for i := range 20 {
		h := newHost(t, Config{VsockDevice: filepath.Join(t.TempDir(), "no-vhost-vsock")})
		if h.Vsock() {
			t.Fatal("vsock enabled without its device")
		}
		if p := h.Port(); p < MinPort || p > MaxPort {
			t.Fatalf("try %d: port %d outside %d..%d", i, p, MinPort, MaxPort)
		}
	}
}

func TestListenRandomRetriesOnAddrInUse(t *testing.T) {
	inUse := errors.New("in use")
	tests := []struct {
		name     string
		failures []error // what the listen calls return before succeeding
		wantErr  error
		wantTry  int
	}{
		{"free at once", nil, nil, 1},
		{"three taken", []error{syscall.EADDRINUSE, syscall.EADDRINUSE, fmt.Errorf("wrapped: %w", syscall.EADDRINUSE)}, nil, 4},
		{"other error stops", []error{syscall.EADDRINUSE, inUse}, inUse, 2},
		{"all taken", repeat(syscall.EADDRINUSE, portTries), syscall.EADDRINUSE, portTries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ports []uint32
			next := uint32(MinPort)
			listen := func(port uint32) (net.Listener, error) {
				ports = append(ports, port)
				if i := len(ports) - 1; i < len(tt.failures) {
					return nil, tt.failures[i]
				}
				return fakeListener{}, nil
			}
			port, ln, err := listenRandom(listen, func() uint32 { next++; return next })
			if len(ports) != tt.wantTry {
				t.Fatalf("%d tries, want %d", len(ports), tt.wantTry)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || ln == nil || port != ports[len(ports)-1] {
				t.Fatalf("port %d ln %v err %v; tried %v", port, ln, err, ports)
			}
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

type fakeListener struct{ net.Listener }

func TestHybridAttachAcceptDetach(t *testing.T) {
	h := newHost(t, Config{})
	dir := t.TempDir()
	epA := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(dir, "a", "link.sock")}
	epB := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(dir, "b", "link.sock")}
	for _, p := range []string{epA.Path, epB.Path} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Attach("uuid-a", epA); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach("uuid-a", epA); err != nil {
		t.Fatalf("attaching again: %v", err)
	}
	if err := h.Attach("uuid-b", epB); err != nil {
		t.Fatal(err)
	}
	pathA := hybrid.HostPath(epA.Path, h.Port())
	fi, err := os.Stat(pathA)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("hybrid socket mode %o, want 600", fi.Mode().Perm())
	}
	for _, tt := range []struct{ uuid, path string }{{"uuid-a", pathA}, {"uuid-b", hybrid.HostPath(epB.Path, h.Port())}, {"uuid-a", pathA}} {
		t.Run(tt.uuid, func(t *testing.T) {
			c, err := net.Dial("unix", tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := acceptOne(t, h)
			if want := (Identity{InstanceUUID: tt.uuid, Link: sdk.LinkHybrid}); got.Identity != want {
				t.Fatalf("identity %+v, want %+v", got.Identity, want)
			}
			if id, ok := IdentityOf(got); !ok || id.InstanceUUID != tt.uuid {
				t.Fatalf("IdentityOf = %+v %v", id, ok)
			}
			if _, err := io.WriteString(c, "ping"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("read %q %v", buf, err)
			}
		})
	}
	h.Detach("uuid-a")
	if _, err := os.Stat(pathA); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("hybrid socket still there after Detach: %v", err)
	}
	if c, err := net.Dial("unix", pathA); err == nil {
		c.Close()
		t.Fatal("dialing a detached instance's socket succeeded")
	}
	h.Detach("uuid-a") // twice is fine
}

func TestHybridStaleSocketReplacedButNotOtherFiles(t *testing.T) {
	h := newHost(t, Config{})
	dir := t.TempDir()
	ep := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(dir, "link.sock")}
	path := hybrid.HostPath(ep.Path, h.Port())
	// A socket left by a daemon that died.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if err := h.Attach("u", ep); err != nil {
		t.Fatalf("attach over a stale socket: %v", err)
	}
	h.Detach("u")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach("u", ep); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("attach over a regular file: %v, want ErrConflict", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatal("a regular file in the way was changed")
	}
}

func TestDialAgentHybrid(t *testing.T) {
	h := newHost(t, Config{})
	ep := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(t.TempDir(), "link.sock")}
	vmm, err := hybrid.Listen(ep.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer vmm.Close()
	agent := vmm.Port(AgentPort)
	go func() {
		for {
			c, err := agent.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := h.DialAgent(ctx, "u"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("DialAgent before Attach: %v, want ErrUnavailable", err)
	}
	if err := h.Attach("u", ep); err != nil {
		t.Fatal(err)
	}
	c, err := h.DialAgent(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q %v", buf, err)
	}
	agent.Close()
	if _, err := h.DialAgent(ctx, "u"); !errors.Is(err, hybrid.ErrNotListening) {
		t.Fatalf("DialAgent with no agent listening: %v, want hybrid.ErrNotListening", err)
	}
}

// chanListener is a fake vsock listener fed by the test.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return &vsock.Addr{ContextID: HostCID} }

type cidConn struct {
	net.Conn
	cid uint32
}

func (c cidConn) RemoteAddr() net.Addr { return &vsock.Addr{ContextID: c.cid, Port: 50000} }

func TestVsockIdentityByPeerCID(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "vhost-vsock")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ln := newChanListener()
	var dialed []uint32
	h := newHost(t, Config{
		VsockDevice: dev,
		ListenVsock: func(port uint32) (net.Listener, error) { return ln, nil },
		DialVsock: func(_ context.Context, cid, port uint32) (net.Conn, error) {
			dialed = append(dialed, cid, port)
			a, b := net.Pipe()
			b.Close()
			return a, nil
		},
	})
	if !h.Vsock() {
		t.Fatal("vsock not enabled although its device exists")
	}
	if err := h.Attach("uuid-7", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 7}); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach("uuid-x", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 7}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second instance on the same CID: %v, want ErrConflict", err)
	}
	for _, cid := range []uint32{2, 0xffffffff} {
		if err := h.Attach("uuid-bad", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: cid}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("CID %d: %v, want ErrInvalid", cid, err)
		}
	}
	// An unknown peer is closed; a known one is handed on with its identity.
	unknownHost, unknownGuest := net.Pipe()
	defer unknownGuest.Close()
	ln.ch <- cidConn{unknownHost, 9}
	if _, err := unknownGuest.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("unknown CID connection: %v, want it closed", err)
	}
	knownHost, knownGuest := net.Pipe()
	defer knownGuest.Close()
	go func() { ln.ch <- cidConn{knownHost, 7} }()
	got := acceptOne(t, h)
	if want := (Identity{InstanceUUID: "uuid-7", Link: sdk.LinkVsock}); got.Identity != want {
		t.Fatalf("identity %+v, want %+v", got.Identity, want)
	}
	ctx := context.Background()
	c, err := h.DialAgent(ctx, "uuid-7")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(dialed) != 2 || dialed[0] != 7 || dialed[1] != AgentPort {
		t.Fatalf("dialed %v, want CID 7 port %d", dialed, AgentPort)
	}
	h.Detach("uuid-7")
	if err := h.Attach("uuid-x", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 7}); err != nil {
		t.Fatalf("CID free again after Detach: %v", err)
	}
}

func TestVsockUnsupportedWithoutDevice(t *testing.T) {
	h := newHost(t, Config{VsockDevice: filepath.Join(t.TempDir(), "none")})
	if err := h.Attach("u", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 5}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("vsock attach without vsock: %v, want ErrNotSupported", err)
	}
	if err := h.Attach("u", &sdk.LinkEndpoint{Kind: "carrier-pigeon"}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("unknown kind: %v, want ErrNotSupported", err)
	}
}

// fakeSerial is a serial transport whose sessions the test drives.
type fakeSerial struct {
	mu       sync.Mutex
	sessions map[string]*fakeSession
}

type fakeSession struct {
	accept *chanListener
	dials  chan uint32
	port   uint32 // the port streams ask for
}

func (f *fakeSerial) Open(_ context.Context, path string) (SerialSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &fakeSession{accept: newChanListener(), dials: make(chan uint32, 4)}
	f.sessions[path] = s
	return s, nil
}

func (s *fakeSession) Accept() (net.Conn, error) { return s.accept.Accept() }

func (s *fakeSession) Dial(_ context.Context, port uint32) (net.Conn, error) {
	s.dials <- port
	a, b := net.Pipe()
	b.Close()
	return a, nil
}
func (s *fakeSession) Close() error { return s.accept.Close() }

func TestSerialLink(t *testing.T) {
	fs := &fakeSerial{sessions: map[string]*fakeSession{}}
	h := newHost(t, Config{Serial: fs})
	if err := h.Attach("uuid-s", &sdk.LinkEndpoint{Kind: sdk.LinkSerial, Path: "/run/vm/serial.sock"}); err != nil {
		t.Fatal(err)
	}
	s := fs.sessions["/run/vm/serial.sock"]
	a, b := net.Pipe()
	defer b.Close()
	go func() { s.accept.ch <- a }()
	if got := acceptOne(t, h); got.Identity != (Identity{InstanceUUID: "uuid-s", Link: sdk.LinkSerial}) {
		t.Fatalf("identity %+v", got.Identity)
	}
	c, err := h.DialAgent(context.Background(), "uuid-s")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if p := <-s.dials; p != AgentPort {
		t.Fatalf("serial dial port %d, want %d", p, AgentPort)
	}
	h.Detach("uuid-s")
	select {
	case <-s.accept.done:
	default:
		t.Fatal("Detach left the serial session open")
	}
}

func TestCloseEndsAccept(t *testing.T) {
	h := newHost(t, Config{})
	ep := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(t.TempDir(), "link.sock")}
	if err := h.Attach("u", ep); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := h.Accept(); errc <- err }()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
	if _, err := os.Stat(hybrid.HostPath(ep.Path, h.Port())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}
	if err := h.Attach("u", ep); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Attach after Close: %v", err)
	}
}

// TestSerialLinkOverSerialmux runs the default serial transport against the
// agent's side of link/serialmux through a Unix socket standing in for
// QEMU's chardev.
func TestSerialLinkOverSerialmux(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serial.sock")
	chardev, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer chardev.Close()
	guest := serialmux.NewGuestOpener(func() (io.ReadWriteCloser, error) { return chardev.Accept() })
	defer guest.Close()
	agentLn, err := guest.Listen(AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := agentLn.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	h := newHost(t, Config{})
	if err := h.Attach("uuid-s", &sdk.LinkEndpoint{Kind: sdk.LinkSerial, Path: path}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A stream for another daemon's port is refused.
	stale, err := guest.Dial(ctx, HostCID, h.Port()+1)
	if err == nil {
		if _, err := stale.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("stream for another port: %v, want it closed", err)
		}
		stale.Close()
	}
	// Guest -> host on the daemon's port, tied to the instance.
	up, err := guest.Dial(ctx, HostCID, h.Port())
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	got := acceptOne(t, h)
	if got.Identity != (Identity{InstanceUUID: "uuid-s", Link: sdk.LinkSerial}) {
		t.Fatalf("identity %+v", got.Identity)
	}
	if _, err := io.WriteString(up, "hi"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q %v", buf, err)
	}
	// Host -> agent.
	down, err := h.DialAgent(ctx, "uuid-s")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	if _, err := io.WriteString(down, "echo"); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, 4)
	if _, err := io.ReadFull(down, buf); err != nil || string(buf) != "echo" {
		t.Fatalf("echo %q %v", buf, err)
	}
}
