package linkhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

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
	if err := h.Attach("uuid-7", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 7}); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach("uuid-x", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 7}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second instance on the same CID: %v, want ErrConflict", err)
	}
	for _, cid := range []uint32{2, 0xffffffff} {
		if err := h.Attach("uuid-bad", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: cid}); !errors.Is(err, errdefs.ErrInvalid) {
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
	if want := (Identity{InstanceUUID: "uuid-7", Link: contract.LinkVsock}); got.Identity != want {
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
	if err := h.Attach("uuid-x", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 7}); err != nil {
		t.Fatalf("CID free again after Detach: %v", err)
	}
}

func TestVsockUnsupportedWithoutDevice(t *testing.T) {
	h := newHost(t, Config{VsockDevice: filepath.Join(t.TempDir(), "none")})
	if err := h.Attach("u", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 5}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("vsock attach without vsock: %v, want ErrNotSupported", err)
	}
	if err := h.Attach("u", &contract.LinkEndpoint{Kind: "carrier-pigeon"}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("unknown kind: %v, want ErrNotSupported", err)
	}
}
