package adminapi

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/unixsock"
)

// SocketMode is the permission of the admin API's Unix socket: the daemon's
// user and group may connect, nobody else.
const SocketMode os.FileMode = 0o660

// ListenUnix listens on the Unix socket path with mode SocketMode. A stale
// socket file left by a dead daemon is removed first; if another daemon
// still answers on it, ListenUnix refuses with an error wrapping
// errdefs.ErrAlreadyExists. A path that exists and is not a socket is never
// removed. Closing the listener removes the socket file.
func ListenUnix(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil:
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listening on %q: the path exists and is not a socket: %w", path, errdefs.ErrAlreadyExists)
		}
		conn, derr := net.DialTimeout("unix", path, 2*time.Second)
		if derr == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("listening on %q: another daemon answers on this socket: %w", path, errdefs.ErrAlreadyExists)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket %q: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("listening on %q: %w", path, err)
	}
	// Created with its mode: a client never finds it wider meanwhile.
	ln, err := unixsock.Listen(path, SocketMode)
	if err != nil {
		return nil, err
	}
	return ln, nil
}
