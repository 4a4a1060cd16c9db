package listener

import (
	"bytes"
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// conn is a connection of a Limited listener: it gives its place back when
// closed, holds its deadlines to the first-request deadline until the
// first request header has been read, and gives every write a deadline of
// its own.
type conn struct {
	net.Conn
	writeTimeout time.Duration
	release      func()
	closeOnce    sync.Once

	mu      sync.Mutex
	pending bool      // the first request header is not yet read
	first   time.Time // its deadline
	readDL  time.Time // what the server asked for meanwhile
	writeDL time.Time
	tail    []byte // the last bytes read, to find the header's end across reads
}

// newConn wraps c; a TLS connection stays one (tlsConn), so that servers
// still see its handshake's state (client certificates).
func newConn(c net.Conn, lim Limits, release func()) net.Conn {
	cc := &conn{Conn: c, writeTimeout: lim.WriteTimeout, release: release}
	if lim.FirstRequest > 0 {
		cc.pending = true
		cc.first = time.Now().Add(lim.FirstRequest)
		_ = c.SetDeadline(cc.first)
	}
	if ts, ok := c.(tlsStater); ok {
		return &tlsConn{conn: cc, ts: ts}
	}
	return cc
}

// tlsStater is a TLS connection (*tls.Conn), as fasthttp recognises one.
type tlsStater interface {
	ConnectionState() tls.ConnectionState
}

// tlsConn is a conn over a TLS connection.
type tlsConn struct {
	*conn
	ts tlsStater
}

// ConnectionState returns the wrapped TLS connection's state.
func (c *tlsConn) ConnectionState() tls.ConnectionState { return c.ts.ConnectionState() }

// Handshake runs the wrapped TLS connection's handshake, if it has one to
// run.
func (c *tlsConn) Handshake() error {
	if h, ok := c.ts.(interface{ Handshake() error }); ok {
		return h.Handshake()
	}
	return nil
}

// NetConn returns the wrapped connection.
func (c *conn) NetConn() net.Conn { return c.Conn }

// headerEnd ends an HTTP request header (RFC 9112 allows a bare LF too).
var headerEnds = [][]byte{[]byte("\r\n\r\n"), []byte("\n\n")}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.pending {
			c.scan(p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

// scan looks for the end of the first request header in b (read after
// c.tail); once found, the server's own deadlines apply. c.mu is held.
func (c *conn) scan(b []byte) {
	buf := append(c.tail, b...)
	for _, end := range headerEnds {
		if bytes.Contains(buf, end) {
			c.pending = false
			c.tail = nil
			_ = c.Conn.SetReadDeadline(c.readDL)
			_ = c.Conn.SetWriteDeadline(c.writeDL)
			return
		}
	}
	if len(buf) > 3 {
		buf = buf[len(buf)-3:]
	}
	c.tail = append(c.tail[:0], buf...)
}

func (c *conn) Write(p []byte) (int, error) {
	if c.writeTimeout > 0 {
		dl := time.Now().Add(c.writeTimeout)
		c.mu.Lock()
		if c.pending {
			dl = earliest(dl, c.first)
		}
		c.mu.Unlock()
		if err := c.Conn.SetWriteDeadline(dl); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// SetDeadline sets both deadlines, held to the first-request deadline
// while the first header is pending.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline, held to the first-request
// deadline while the first header is pending.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if c.pending {
		c.readDL = t
		t = earliest(t, c.first)
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline, held to the first-request
// deadline while the first header is pending. With a WriteTimeout, each
// write sets its own deadline anyway.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	if c.pending {
		c.writeDL = t
		t = earliest(t, c.first)
	}
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection and gives its place back (once).
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}

// earliest returns the earlier of two deadlines, where zero is none.
func earliest(t, limit time.Time) time.Time {
	if t.IsZero() || t.After(limit) {
		return limit
	}
	return t
}
