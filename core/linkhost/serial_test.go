package linkhost

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

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
	if err := h.Attach("uuid-s", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/run/vm/serial.sock"}); err != nil {
		t.Fatal(err)
	}
	s := fs.sessions["/run/vm/serial.sock"]
	a, b := net.Pipe()
	defer b.Close()
	go func() { s.accept.ch <- a }()
	if got := acceptOne(t, h); got.Identity != (Identity{InstanceUUID: "uuid-s", Link: contract.LinkSerial}) {
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
	if err := h.Attach("uuid-s", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: path}); err != nil {
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
	if got.Identity != (Identity{InstanceUUID: "uuid-s", Link: contract.LinkSerial}) {
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
