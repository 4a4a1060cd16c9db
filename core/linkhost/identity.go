package linkhost

import (
	"net"
	"sync"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// Identity names the instance a link connection belongs to and the link it
// came in on. It is decided by the host from where the connection arrived
// (the hybrid socket it was accepted on, the vsock peer CID, the serial
// session), never from anything the guest says.
type Identity struct {
	InstanceUUID string
	Link         contract.LinkKind
}

// Conn is a connection accepted on a link, tied to one instance.
type Conn struct {
	net.Conn
	Identity Identity

	release     func() // frees the connection's slot of its instance's cap
	releaseOnce sync.Once
}

// Close closes the connection and frees its place among the instance's
// link connections (Config.MaxConnsPerInstance).
func (c *Conn) Close() error {
	err := c.Conn.Close()
	if c.release != nil {
		c.releaseOnce.Do(c.release)
	}
	return err
}

// WithIdentity ties c to id. Tests and in-process callers (benchmarks serving
// devlxd over a local socket) use it to hand connections to the devlxd
// server as if a link had accepted them.
func WithIdentity(c net.Conn, id Identity) *Conn {
	return &Conn{Conn: c, Identity: id}
}

// IdentityOf returns the identity of a connection accepted by a Host,
// looking through wrappers that expose NetConn (such as *tls.Conn). It
// reports false for a connection no link accepted.
func IdentityOf(c net.Conn) (Identity, bool) {
	for c != nil {
		switch x := c.(type) {
		case *Conn:
			return x.Identity, true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return Identity{}, false
		}
	}
	return Identity{}, false
}
