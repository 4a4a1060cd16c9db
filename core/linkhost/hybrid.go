package linkhost

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/unixsock"
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
	id := Identity{InstanceUUID: a.uuid, Link: a.ep.Kind} // hybrid, or vsock through a user-space device
	if err := h.startGate(); err != nil {
		a.close(h)
		return fmt.Errorf("attaching hybrid link of instance %s: %w", a.uuid, err)
	}
	if h.gate != nil {
		g := &gatedListener{a: a, ln: ln, id: id, bo: acceptBackoff()}
		fd, err := h.gate.register(g)
		if err != nil {
			a.close(h)
			return fmt.Errorf("attaching hybrid link of instance %s: %w", a.uuid, err)
		}
		a.gateFD, a.gated = fd, true
		return nil
	}
	h.wg.Add(1)
	go h.acceptFrom(a, ln.Accept, id)
	return nil
}

// gatedListener is a hybrid listener the gate accepts on: no goroutine
// waits on it (a daemon of 10,000 guests would park 10,000).
type gatedListener struct {
	a  *attachment
	ln net.Listener
	fd int32
	id Identity
	bo *backoff.ExponentialBackOff // owned by the gate's goroutine
}

// gateAcceptWait bounds an accept the gate makes on a listener it was told
// has a connection queued (the connection may have gone meanwhile).
const gateAcceptWait = 20 * time.Millisecond

// acceptReady accepts one connection of g, whose descriptor of the budget
// the gate took, and hands it on from a goroutine of its own. After a
// temporary error (EMFILE and the like) it watches g again after a backoff;
// after any other the link is marked failed, so the next Attach re-creates
// it, as acceptFrom does.
func (h *Host) acceptReady(g *gatedListener) {
	dl, _ := g.ln.(interface{ SetDeadline(time.Time) error })
	if dl != nil {
		_ = dl.SetDeadline(time.Now().Add(gateAcceptWait))
	}
	c, err := g.ln.Accept()
	if dl != nil {
		_ = dl.SetDeadline(time.Time{})
	}
	if err != nil {
		h.fds.release()
		select {
		case <-g.a.done:
			return
		case <-h.done:
			return
		default:
		}
		if temporary(err) {
			delay := g.bo.NextBackOff()
			h.cfg.Logger.Debug("linkhost: temporary accept error, retrying", "instance", g.id.InstanceUUID, "link", g.id.Link, "err", err, "in", delay)
			time.AfterFunc(delay, func() { h.gate.rearm(g.fd) })
			return
		}
		h.cfg.Logger.Warn("linkhost: link stopped accepting", "instance", g.id.InstanceUUID, "link", g.id.Link, "err", err)
		close(g.a.failed)
		return
	}
	g.bo.Reset()
	h.gate.rearm(g.fd)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.admit(g.a, &budgetConn{Conn: c, release: h.fds.release}, g.id)
	}()
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
