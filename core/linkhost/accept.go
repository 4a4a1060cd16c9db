package linkhost

import (
	"net"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/guestlink/guestlink/core/listener"
)

// Backoff of an accept loop after a temporary error (such as EMFILE): the
// daemon's one policy for every listener (core/listener).
const (
	minAcceptBackoff = listener.MinBackoff
	maxAcceptBackoff = listener.MaxBackoff
)

// acceptFrom hands every connection accept returns on, tied to id, until
// the attachment ends or accept fails for good. After a temporary error
// (EMFILE and the like) it backs off and retries; after any other it marks
// the attachment failed, so the next Attach re-creates it.
func (h *Host) acceptFrom(a *attachment, accept func() (net.Conn, error), id Identity) {
	defer h.wg.Done()
	bo := acceptBackoff()
	for {
		c, err := accept()
		if err != nil {
			select {
			case <-a.done:
				return
			case <-h.done:
				return
			default:
			}
			if temporary(err) {
				delay := bo.NextBackOff()
				h.cfg.Logger.Debug("linkhost: temporary accept error, retrying", "instance", id.InstanceUUID, "link", id.Link, "err", err, "in", delay)
				if !h.sleep(delay, a.done) {
					return
				}
				continue
			}
			h.cfg.Logger.Warn("linkhost: link stopped accepting", "instance", id.InstanceUUID, "link", id.Link, "err", err)
			close(a.failed)
			return
		}
		bo.Reset()
		h.admit(a, c, id)
	}
}

// admit hands c on tied to id, unless the instance already holds
// Config.MaxConnsPerInstance connections: then c is closed at once, and the
// first refusal of a burst is logged.
func (h *Host) admit(a *attachment, c net.Conn, id Identity) {
	if a.live.Add(1) > int64(h.cfg.MaxConnsPerInstance) {
		a.live.Add(-1)
		h.cfg.Observer.LinkConn(string(id.Link), false)
		c.Close()
		if !a.overCap.Swap(true) {
			h.cfg.Logger.Warn("linkhost: instance holds too many link connections, closing new ones", "instance", id.InstanceUUID, "link", id.Link, "max", h.cfg.MaxConnsPerInstance)
		}
		return
	}
	a.overCap.Store(false)
	h.cfg.Observer.LinkConn(string(id.Link), true)
	lc := WithIdentity(c, id)
	lc.release = func() {
		a.untrack(lc)
		a.live.Add(-1)
	}
	if !a.track(lc) {
		lc.Close() // detached meanwhile
		return
	}
	h.hand(lc, a.done)
}

// temporary reports whether an accept error may go away by itself (out of
// file descriptors or memory, an aborted or interrupted accept, a timeout).
func temporary(err error) bool { return listener.Temporary(err) }

// acceptBackoff returns the waits between accepts after temporary errors:
// minAcceptBackoff doubling up to maxAcceptBackoff (5 ms, 10 ms, ... 1 s),
// without jitter; Reset after a successful accept starts over.
func acceptBackoff() *backoff.ExponentialBackOff { return listener.NewBackoff() }

// sleep waits d, and reports false when the Host closed or stop was closed
// first.
func (h *Host) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-h.done:
		return false
	}
}

// hand passes c to Accept, or closes it when nobody will take it.
func (h *Host) hand(c *Conn, detached <-chan struct{}) {
	select {
	case h.conns <- c:
	case <-detached:
		c.Close()
	case <-h.done:
		c.Close()
	}
}
