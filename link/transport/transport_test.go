package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/hybrid"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		kind    string
		wantErr error
	}{
		{"vsock", "vsock", nil},
		{"hybrid:/run/vm.sock", "hybrid", nil},
		{"hybrid:", "", ErrBadSpec},
		{"hybrid", "", ErrBadSpec},
		{"vsock:3", "", ErrBadSpec},
		{"serial:org.guestlink.link", "", ErrNotBuilt},
		{"tcp:1.2.3.4", "", ErrUnknownLink},
		{"", "", ErrUnknownLink},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			g, err := Parse(tt.spec)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, want %v", tt.spec, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.spec, err)
			}
			if g.Kind() != tt.kind {
				t.Fatalf("Kind() = %q, want %q", g.Kind(), tt.kind)
			}
		})
	}
}

type fakeGuest struct{ arg string }

func (fakeGuest) Listen(uint32) (net.Listener, error) { return nil, errors.New("no") }
func (fakeGuest) Dial(context.Context, uint32, uint32) (net.Conn, error) {
	return nil, errors.New("no")
}
func (fakeGuest) Kind() string { return "fake" }

var registerRuns atomic.Int64

func TestRegister(t *testing.T) {
	// A scheme per run, so that -count=N does not register twice.
	scheme := fmt.Sprintf("fake%d", registerRuns.Add(1))
	Register(scheme, func(arg string) (Guest, error) { return fakeGuest{arg}, nil })
	g, err := Parse(scheme + ":x")
	if err != nil {
		t.Fatalf("Parse registered scheme: %v", err)
	}
	if fg, ok := g.(fakeGuest); !ok || fg.arg != "x" {
		t.Fatalf("Parse(fake:x) = %#v", g)
	}
	defer func() {
		if recover() == nil {
			t.Fatalf("registering vsock did not panic")
		}
	}()
	Register("vsock", nil)
}

func TestHybridGuest(t *testing.T) {
	uds := filepath.Join(t.TempDir(), "vm.sock")
	g, err := Parse("hybrid:" + uds)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Host -> guest: the host dials the VMM socket with CONNECT.
	l, err := g.Listen(8443)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("from guest"))
			c.Close()
		}
	}()
	c, err := hybrid.Dial(ctx, uds, 8443)
	if err != nil {
		t.Fatalf("hybrid.Dial: %v", err)
	}
	b, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "from guest" {
		t.Fatalf("read = (%q, %v)", b, err)
	}

	// Guest -> host: the guest dials <uds>_<port>.
	hl, err := net.Listen("unix", hybrid.HostPath(uds, 1234))
	if err != nil {
		t.Fatalf("host listen: %v", err)
	}
	defer hl.Close()
	go func() {
		c, err := hl.Accept()
		if err == nil {
			_, _ = c.Write([]byte("from host"))
			c.Close()
		}
	}()
	gc, err := g.Dial(ctx, 2, 1234)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	b, err = io.ReadAll(gc)
	gc.Close()
	if err != nil || string(b) != "from host" {
		t.Fatalf("read = (%q, %v)", b, err)
	}

	// Closing the last port listener releases the VMM socket.
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := hybrid.Dial(ctx, uds, 8443); err == nil {
		t.Fatalf("Dial after Close succeeded")
	}
	l2, err := g.Listen(8443)
	if err != nil {
		t.Fatalf("Listen again: %v", err)
	}
	l2.Close()
}
