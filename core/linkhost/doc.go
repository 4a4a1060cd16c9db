// Package linkhost is the host side of the guest links: it picks the daemon's
// link port, listens for connections from agents (vsock on host CID 2 when
// /dev/vhost-vsock exists, one hybrid Unix socket per running instance,
// streams of a serial session) and dials agents on their link port 8443.
// Every connection it hands on is tied to the one instance it came from (an
// Identity), decided by where it arrived, never by what the guest says.
//
// One file per concern: host.go (the Host, Attach, Detach, DialAgent),
// identity.go (Identity and Conn), accept.go (the accept loop every link
// shares: backoff after temporary errors, the per-instance connection cap),
// and one file per transport: vsock.go, hybrid.go, serial.go.
//
// ReserveCID is not called by the daemon yet (guest CIDs are the backends'
// business, and plugins cannot import core): it stays, with its tests, until
// CID reservation has one home that both sides can import.
package linkhost
