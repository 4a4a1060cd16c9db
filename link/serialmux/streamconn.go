package serialmux

import (
	"errors"
	"os"

	"github.com/hashicorp/yamux"
)

// streamConn is a yamux stream whose deadline errors are
// os.ErrDeadlineExceeded. yamux's ErrTimeout says it is not temporary, and
// crypto/tls keeps a read error that is not temporary for good: net/http's
// Hijack aborts its background read with a deadline in the past, so a TLS
// connection over a bare stream could never be read again after a
// websocket upgrade (the agent's exec websockets on a serial link).
type streamConn struct{ *yamux.Stream }

func (c streamConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	if errors.Is(err, yamux.ErrTimeout) {
		err = os.ErrDeadlineExceeded
	}
	return n, err
}

func (c streamConn) Write(b []byte) (int, error) {
	n, err := c.Stream.Write(b)
	if errors.Is(err, yamux.ErrTimeout) {
		err = os.ErrDeadlineExceeded
	}
	return n, err
}
