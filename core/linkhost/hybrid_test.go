package linkhost

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestHybridAttachAcceptDetach(t *testing.T) {
	h := newHost(t, Config{})
	dir := t.TempDir()
	epA := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(dir, "a", "link.sock")}
	epB := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(dir, "b", "link.sock")}
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
			if want := (Identity{InstanceUUID: tt.uuid, Link: contract.LinkHybrid}); got.Identity != want {
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
	ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(dir, "link.sock")}
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
	ep := &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: filepath.Join(t.TempDir(), "link.sock")}
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

// TestVsockThroughUserDevice attaches vsock endpoints that carry a socket
// path (a user-space vsock device, docs/vsock.md): the host serves them
// with the hybrid convention, the accepted connections say link vsock, the
// agent is dialled through CONNECT, and two guests whose private devices
// gave them the same CID do not conflict.
func TestVsockThroughUserDevice(t *testing.T) {
	h := newHost(t, Config{})
	dir := t.TempDir()
	var eps []*contract.LinkEndpoint
	for _, name := range []string{"a", "b"} {
		ep := &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 7, Path: filepath.Join(dir, name+".sock")}
		if err := h.Attach("uuid-"+name, ep); err != nil {
			t.Fatalf("attaching %s with CID 7: %v", name, err)
		}
		eps = append(eps, ep)
	}
	// Guest to host: the device connects to <path>_<port>.
	c, err := net.Dial("unix", hybrid.HostPath(eps[1].Path, h.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := acceptOne(t, h); got.Identity != (Identity{InstanceUUID: "uuid-b", Link: contract.LinkVsock}) {
		t.Fatalf("identity %+v, want uuid-b over vsock", got.Identity)
	}
	// Host to guest: CONNECT on the device's socket.
	vmm, err := hybrid.Listen(eps[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer vmm.Close()
	agent := vmm.Port(AgentPort)
	go func() {
		if c, err := agent.Accept(); err == nil {
			io.WriteString(c, "agent")
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ac, err := h.DialAgent(ctx, "uuid-a")
	if err != nil {
		t.Fatalf("DialAgent through the device socket: %v", err)
	}
	defer ac.Close()
	if b, err := io.ReadAll(ac); err != nil || string(b) != "agent" {
		t.Fatalf("read %q, %v", b, err)
	}
}
