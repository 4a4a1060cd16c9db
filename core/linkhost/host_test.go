package linkhost

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
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

func TestCloseEndsAccept(t *testing.T) {
	h := newHost(t, Config{})
	ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(t.TempDir(), "link.sock")}
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
