package daemon

import (
	"context"
	"net"

	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/link/serialmux"
)

// serialTransport opens serial links (QEMU without vhost-vsock) with
// link/serialmux: a yamux session over the guest's Unix-socket chardev.
type serialTransport struct{}

func (serialTransport) Open(ctx context.Context, path string) (linkhost.SerialSession, error) {
	h, err := serialmux.DialHost(ctx, path)
	if err != nil {
		return nil, err
	}
	return serialSession{h}, nil
}

// serialSession adapts a serialmux.Host to linkhost.SerialSession. Streams
// the guest opens name the daemon's link port; the host has one port, so
// the name is not needed to route them.
type serialSession struct{ h *serialmux.Host }

func (s serialSession) Accept() (net.Conn, error) {
	c, _, err := s.h.Accept()
	return c, err
}

func (s serialSession) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	return s.h.Dial(ctx, port)
}

func (s serialSession) Close() error { return s.h.Close() }

var (
	_ linkhost.SerialTransport = serialTransport{}
	_ linkhost.SerialSession   = serialSession{}
)
