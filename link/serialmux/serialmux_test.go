package serialmux

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/link/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pair returns a Host and a Guest joined by a net.Pipe.
func pair(t *testing.T) (*Host, *Guest) {
	t.Helper()
	a, b := net.Pipe()
	return pairOver(t, a, b)
}

// pairOver runs the handshake of a Host on a and a Guest on b.
func pairOver(t *testing.T, a, b io.ReadWriteCloser) (*Host, *Guest) {
	t.Helper()
	used := false
	g := NewGuestOpener(func() (io.ReadWriteCloser, error) {
		if used {
			return nil, errors.New("only one stream in this test")
		}
		used = true
		return b, nil
	})
	g.mu.Lock()
	g.startLocked()
	g.mu.Unlock()
	h := newHost(a, nil)
	t.Cleanup(func() { h.Close(); g.Close(); a.Close(); b.Close() })
	return h, g
}

// staleConn is a connection whose reads start with leftovers.
type staleConn struct {
	io.Reader
	net.Conn
}

func (c staleConn) Read(p []byte) (int, error) { return c.Reader.Read(p) }

// TestStaleBytesSkipped puts leftovers of an old session (yamux frames,
// stray text, an old handshake) in front of both directions: the new
// session must still work.
func TestStaleBytesSkipped(t *testing.T) {
	a, b := net.Pipe()
	stale := func() io.Reader {
		return bytes.NewReader(append([]byte{0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
			"\nGLMX-GO 0123456789abcdef\nGLMX-ACK 0123456789abcdef\njunk\n"...))
	}
	h, g := pairOver(t, staleConn{io.MultiReader(stale(), a), a}, staleConn{io.MultiReader(stale(), b), b})
	l, _ := g.Listen(8443)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	c, err := h.Dial(ctx(t), 8443)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestHostToGuest(t *testing.T) {
	h, g := pair(t)
	l, err := g.Listen(8443)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo
	}()
	c, err := h.Dial(ctx(t), 8443)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("hello "), 10000)
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo = %d bytes, %v", len(got), err)
	}
}

func TestGuestToHost(t *testing.T) {
	h, g := pair(t)
	g.Listen(8443) // starts the guest session
	type acc struct {
		c    net.Conn
		port uint32
		err  error
	}
	ch := make(chan acc, 1)
	go func() {
		c, p, err := h.Accept()
		ch <- acc{c, p, err}
	}()
	c, err := g.Dial(ctx(t), 2, 40123)
	if err != nil {
		t.Fatalf("guest Dial: %v", err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	a := <-ch
	if a.err != nil || a.port != 40123 {
		t.Fatalf("Accept = port %d, %v; want 40123", a.port, a.err)
	}
	defer a.c.Close()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(a.c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestUnknownPortIsClosed(t *testing.T) {
	h, g := pair(t)
	g.Listen(8443)
	c, err := h.Dial(ctx(t), 9999)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on a stream to an unserved port = %v, want EOF", err)
	}
}

func TestHostGoneEndsSession(t *testing.T) {
	h, g := pair(t)
	l, _ := g.Listen(8443)
	if _, err := g.session(ctx(t)); err != nil {
		t.Fatal(err)
	}
	h.Close()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("host session not done after Close")
	}
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// The only stream is gone: the guest finds no new session.
	if _, err := g.Dial(c, 2, 1); err == nil {
		t.Fatal("Dial succeeded without a host")
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v", err)
	}
}

func TestParseRegistersSerial(t *testing.T) {
	tests := []struct {
		spec string
		ok   bool
	}{
		{"serial:" + PortName, true},
		{"serial:", false},
		{"serial:../x", false},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			g, err := transport.Parse(tt.spec)
			if (err == nil) != tt.ok {
				t.Fatalf("Parse(%q) = %v", tt.spec, err)
			}
			if err == nil && g.Kind() != "serial" {
				t.Fatalf("Kind = %q", g.Kind())
			}
			if !tt.ok && !errors.Is(err, transport.ErrBadSpec) {
				t.Fatalf("Parse(%q) = %v, want ErrBadSpec", tt.spec, err)
			}
		})
	}
}

func TestBadHeader(t *testing.T) {
	var b bytes.Buffer
	writeHeader(&b, 8443)
	if p, err := readHeader(&b); err != nil || p != 8443 {
		t.Fatalf("round trip = %d, %v", p, err)
	}
	if _, err := readHeader(bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("readHeader(garbage) = %v", err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestHostReconnects plays QEMU's chardev socket with a Unix listener: each
// connection gets a fresh guest side. When the first guest side goes away,
// the Host connects again, synchronises, and streams flow through the same
// Host; when the socket is gone, the Host ends.
func TestHostReconnects(t *testing.T) {
	defer func(d time.Duration) { reconnectFor = d }(reconnectFor)
	reconnectFor = time.Second
	path := filepath.Join(t.TempDir(), "link.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	guestOn := func(c net.Conn) *Guest {
		used := false
		g := NewGuestOpener(func() (io.ReadWriteCloser, error) {
			if used {
				return nil, errors.New("this guest side is gone")
			}
			used = true
			return c, nil
		})
		l, err := g.Listen(8443)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("hi"))
				c.Close()
			}
		}()
		return g
	}
	h, err := DialHost(ctx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hello := func() {
		t.Helper()
		c, err := h.Dial(ctx(t), 8443)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		defer c.Close()
		buf := make([]byte, 2)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
			t.Fatalf("read %q, %v", buf, err)
		}
	}
	c1 := <-conns
	g1 := guestOn(c1)
	hello()
	g1.Close()
	c1.Close()

	c2 := <-conns // the Host came back by itself
	g2 := guestOn(c2)
	defer g2.Close()
	hello()

	ln.Close()
	os.Remove(path)
	g2.Close()
	c2.Close()
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Host did not end after its socket disappeared")
	}
	if _, _, err := h.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after the end = %v, want ErrClosed", err)
	}
}
