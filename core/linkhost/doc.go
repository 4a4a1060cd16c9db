// Package linkhost is the host side of the guest links: it picks the daemon's
// link port, listens for connections from agents (vsock on host CID 2 when
// /dev/vhost-vsock exists, one hybrid Unix socket per running instance,
// streams of a serial session) and dials agents on their link port 8443.
// Every connection it hands on is tied to the one instance it came from (an
// Identity), decided by where it arrived, never by what the guest says.
package linkhost
