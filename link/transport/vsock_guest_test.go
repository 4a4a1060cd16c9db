//go:build guestvsock

// This file needs AF_VSOCK with a peer, which a host seldom has (no
// vsock_loopback in containers, nested VMs or CI runners), so it is built
// only with -tags guestvsock: e2e's TestQEMUUserVsock builds this
// package's test binary with the tag and runs it inside its busybox guest,
// on guestlink's own vsock device (docs/vsock.md), with the environment
// below. On a host with vsock_loopback it also runs by hand:
//
//	go test -tags guestvsock -run TestVSockGuest ./link/transport

package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mdlayher/vsock"
)

// Environment of TestVSockGuest inside a guest (set by e2e).
const (
	// EnvTestHostPort is the port the host serves on CID 2: the test dials
	// it, writes "guest <CID>\n" and reads the host's line; then it accepts
	// one connection from the host on vsockTestPort and echoes one line.
	EnvTestHostPort = "GUESTLINK_TEST_VSOCK_HOST_PORT"
	// EnvTestCID is the guest's CID as the device gives it; the test checks
	// that the guest's kernel reports the same (vsock.ContextID).
	EnvTestCID = "GUESTLINK_TEST_VSOCK_CID"
)

// vsockTestPort is the port TestVSockGuest listens on.
const vsockTestPort = 52841

// TestVSockGuest runs the vsock link of Parse("vsock") over real AF_VSOCK:
// Listen on VMADDR_CID_ANY, Dial, the local CID lookup. In a guest (with
// EnvTestHostPort) the peer is the host through the guest's vsock device,
// both ways: the guest dials CID 2, the host dials the guest's listener.
// Without it the peer is this machine's loopback (CID 1), which needs
// vsock_loopback; lacking both is a failure (the build tag says the
// machine has one).
func TestVSockGuest(t *testing.T) {
	g, err := Parse("vsock")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	l, err := g.Listen(vsockTestPort)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	hostPort := os.Getenv(EnvTestHostPort)
	if hostPort == "" { // loopback: dial our own listener
		go func() {
			c, err := l.Accept()
			if err == nil {
				_, _ = c.Write([]byte("hi"))
				c.Close()
			}
		}()
		c, err := g.Dial(ctx, vsock.Local, vsockTestPort)
		if err != nil {
			t.Fatalf("Dial over loopback (needs vsock_loopback): %v", err)
		}
		defer c.Close()
		if b, err := io.ReadAll(c); err != nil || string(b) != "hi" {
			t.Fatalf("read = (%q, %v)", b, err)
		}
		return
	}

	local, err := vsock.ContextID()
	if err != nil {
		t.Fatalf("the guest's CID: %v", err)
	}
	if want := os.Getenv(EnvTestCID); want != strconv.FormatUint(uint64(local), 10) {
		t.Errorf("the guest's CID is %d, the device gives %s", local, want)
	}
	port, err := strconv.ParseUint(hostPort, 10, 32)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvTestHostPort, hostPort, err)
	}
	// Guest to host: CID 2 is the host; the device maps the port to its
	// host socket.
	c, err := g.Dial(ctx, vsock.Host, uint32(port))
	if err != nil {
		t.Fatalf("Dial 2:%d: %v", port, err)
	}
	fmt.Fprintf(c, "guest %d\n", local)
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || line != "host ok\n" {
		t.Fatalf("the host answered %q, %v; want \"host ok\"", line, err)
	}
	// Host to guest: the host dials the listener once it has our line.
	a, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	defer a.Close()
	line, err = bufio.NewReader(a).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the host's connection: %v", err)
	}
	if _, err := fmt.Fprintf(a, "echo %s", line); err != nil {
		t.Fatalf("answering the host: %v", err)
	}
	t.Logf("guest CID %d: dialed the host at 2:%d, accepted the host on %d", local, port, vsockTestPort)
}
