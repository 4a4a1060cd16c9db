package linkhost

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"

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
	a.ln, a.lnFD = ln, true
	if h.fds.take() {
		h.cfg.Logger.Warn("linkhost: hybrid links hold more descriptors than MaxDescriptors; serving this one anyway", "instance", a.uuid, "max", h.cfg.MaxDescriptors)
	}
	accept := ln.Accept
	if h.gate != nil {
		fd, permit, err := h.gate.register(ln)
		if err != nil {
			a.close(h)
			return fmt.Errorf("attaching hybrid link of instance %s: %w", a.uuid, err)
		}
		a.gateFD, a.gated = fd, true
		accept = func() (net.Conn, error) { return h.acceptGated(a, ln, fd, permit) }
	}
	h.wg.Add(1)
	go h.acceptFrom(a, accept, Identity{InstanceUUID: a.uuid, Link: sdk.LinkHybrid})
	return nil
}

// acceptGated accepts one connection once the gate granted it a descriptor
// of the budget (see acceptGate); until then the connection waits in the
// kernel's backlog. The connection gives its descriptor back when closed.
func (h *Host) acceptGated(a *attachment, ln net.Listener, fd int32, permit chan struct{}) (net.Conn, error) {
	select {
	case <-permit:
	case <-a.done:
		return nil, net.ErrClosed
	case <-h.done:
		return nil, net.ErrClosed
	}
	c, err := ln.Accept()
	h.gate.rearm(fd)
	if err != nil {
		h.fds.release()
		return nil, err
	}
	return &budgetConn{Conn: c, release: h.fds.release}, nil
}

// budgetConn gives its descriptor back to the budget when closed.
type budgetConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *budgetConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
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
