package transport

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/vsock"
)

// requiresVsockLoopback skips unless AF_VSOCK loopback (CID 1) works here.
// It is a kernel feature no package provides (a VM or a sandbox may lack
// it), so it skips even with CI=true, unlike internal/testenv requirements.
func requiresVsockLoopback(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/vsock"); err != nil {
		t.Skip("no /dev/vsock: AF_VSOCK is not available on this machine")
	}
	l, err := vsock.ListenContextID(vsock.Local, 0, nil)
	if err != nil {
		t.Skipf("vsock loopback not available (load vsock_loopback): %v", err)
	}
	l.Close()
}

func TestVSockGuest(t *testing.T) {
	requiresVsockLoopback(t)
	g, err := Parse("vsock")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	const port = 52841
	l, err := g.Listen(port)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skipf("vsock port %d in use", port)
	}
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := g.Dial(ctx, vsock.Local, port)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hi" {
		t.Fatalf("read = (%q, %v)", b, err)
	}
}
