package serialmux

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestStreamDeadlineIsTemporary: a read that hits a deadline (as net/http's
// Hijack causes, with a deadline in the past) fails with a temporary
// os.ErrDeadlineExceeded, and the stream reads again once the deadline is
// cleared. yamux's own error says "not temporary", which crypto/tls keeps
// for good: a TLS connection over the stream was dead after a websocket
// upgrade (exec over a serial link).
func TestStreamDeadlineIsTemporary(t *testing.T) {
	h, g := pair(t)
	l, err := g.Listen(8443)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := h.Dial(ctx(t), 8443)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	defer s.Close()
	one := make([]byte, 1)
	if _, err := io.ReadFull(s, one); err != nil {
		t.Fatal(err)
	}
	for name, conn := range map[string]net.Conn{"accepted": s, "dialed": c} {
		if err := conn.SetReadDeadline(time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Read(one)
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s stream: read past its deadline: %v, want os.ErrDeadlineExceeded", name, err)
		}
		if te, ok := err.(interface{ Temporary() bool }); !ok || !te.Temporary() {
			t.Fatalf("%s stream: the deadline error is not temporary: %v", name, err)
		}
		if err := conn.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, one); err != nil || one[0] != 'y' {
		t.Fatalf("read after the deadline was cleared: %q %v", one, err)
	}
}
