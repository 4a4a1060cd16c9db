package linkhost

import (
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/unixsock"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// attachHybrid listens on the instance's hybrid socket,
// hybrid.HostPath(ep.Path, Port()) with mode 0600, and accepts on it.
func (h *Host) attachHybrid(a *attachment) error {
	if a.ep.Path == "" {
		return fmt.Errorf("attaching hybrid link of instance %s: empty socket path: %w", a.uuid, errdefs.ErrInvalid)
	}
	a.path = hybrid.HostPath(a.ep.Path, h.port)
	ln, err := listenUnix(a.path)
	if err != nil {
		return fmt.Errorf("attaching hybrid link of instance %s: %w", a.uuid, err)
	}
	a.ln = ln
	h.wg.Add(1)
	go h.acceptFrom(a, ln.Accept, Identity{InstanceUUID: a.uuid, Link: sdk.LinkHybrid})
	return nil
}

// listenUnix listens on path with mode 0600, replacing a stale socket file
// (left by a daemon that died) but nothing else.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listening on %q: a file that is not a socket is in the way: %w", path, errdefs.ErrConflict)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %q: %w", path, err)
		}
	}
	ln, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, err
	}
	return ln, nil
}
