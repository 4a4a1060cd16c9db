// Package serialmux is the serial guest link: yamux streams multiplexed over
// one byte stream, the virtio-serial port PortName that QEMU backs with a
// Unix-socket chardev. The daemon's side (Host) connects to that socket;
// the agent's side (Guest) opens /dev/virtio-ports/PortName and implements
// the agent's transport.Guest, registered as the "serial" link scheme.
//
// Each session starts with a short handshake (sync.go) so that a host that
// reconnects (the daemon restarted) never mixes with the previous session.
// Either side may open streams. Each stream starts with an 8-byte header
// naming the port it targets ("GLM", a version byte 1, the port as a
// big-endian uint32): guest->host streams target the daemon's link port,
// host->guest streams target the agent's port 8443. A stream for a port
// nobody listens on is closed at once, which the opener sees as EOF.
package serialmux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// PortName is the name of the virtio-serial port that carries the link.
const PortName = "com.canonical.lxd.link"

// headerLen is the size of a stream header.
const headerLen = 8

var headerMagic = [3]byte{'G', 'L', 'M'}

const headerVersion = 1

// ErrBadHeader is returned when a stream does not start with a valid header.
var ErrBadHeader = errors.New("bad serialmux stream header")

// ErrClosed is returned by calls on a closed Host or Guest.
var ErrClosed = errors.New("serialmux closed")

// writeHeader writes the header of a stream targeting port: "GLM", the
// version byte, and the port as a big-endian uint32.
func writeHeader(w io.Writer, port uint32) error {
	var b [headerLen]byte
	copy(b[:3], headerMagic[:])
	b[3] = headerVersion
	binary.BigEndian.PutUint32(b[4:], port)
	_, err := w.Write(b[:])
	return err
}

// readHeader reads a stream header and returns the target port.
func readHeader(r io.Reader) (uint32, error) {
	var b [headerLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, fmt.Errorf("reading stream header: %w", err)
	}
	if [3]byte(b[:3]) != headerMagic || b[3] != headerVersion {
		return 0, fmt.Errorf("%w: % x", ErrBadHeader, b)
	}
	return binary.BigEndian.Uint32(b[4:]), nil
}

// yamuxConfig is the session configuration of both sides.
func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	// A guest agent that restarted leaves the host's session talking to
	// nobody: keepalives find out within about half a minute and the Host
	// synchronises again.
	c.EnableKeepAlive = true
	c.KeepAliveInterval = 10 * time.Second
	c.ConnectionWriteTimeout = 20 * time.Second
	c.StreamOpenTimeout = 20 * time.Second
	return c
}

// headerTimeout bounds how long an accepted stream may take to send its header.
const headerTimeout = 30 * time.Second

// streamPort reads the port header of a stream the peer opened, giving it
// headerTimeout; a stream without a valid header is closed.
func streamPort(s *yamux.Stream) (uint32, bool) {
	s.SetReadDeadline(time.Now().Add(headerTimeout))
	port, err := readHeader(s)
	if err != nil {
		s.Close()
		return 0, false
	}
	s.SetReadDeadline(time.Time{})
	return port, true
}
