package linkhost

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/time/rate"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/sdnotify"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// NotifyHandler is told of the systemd notifications guests send to the
// host's notification port (Config.Notify, link/sdnotify): id is the
// instance whose vsock device carried the connection (the user-space
// device's socket it arrived on, or the peer CID on the kernel's vsock),
// never anything the message says. Notify is called once per well-formed
// message, from the connection's goroutine, before the connection is
// closed; it may block for a while (the connection's guest waits).
type NotifyHandler interface {
	Notify(id Identity, m sdnotify.Message)
}

// Bounds of the notification port, per instance: a guest's systemd sends a
// handful of messages per boot, one connection each.
const (
	// notifyReadTimeout bounds the wait for a whole message (the guest
	// shuts its side down after writing it).
	notifyReadTimeout = 10 * time.Second
	// maxNotifyConns is how many notification connections one instance
	// holds open at once; more are closed unread.
	maxNotifyConns = 4
	// notifyBurst and notifyRate bound the messages one instance gets
	// read: a boot sends a dozen (READY=1, a unit per target); past them
	// connections are closed unread.
	notifyBurst = 64
	notifyRate  = rate.Limit(2) // per second
)

// notifyLimits is the per-instance budget of the notification port.
type notifyLimits struct {
	live    atomic.Int32
	limiter *rate.Limiter
	warned  atomic.Bool // a refusal was logged since the last message read
}

func newNotifyLimits() *notifyLimits {
	return &notifyLimits{limiter: rate.NewLimiter(notifyRate, notifyBurst)}
}

// attachNotify listens on the notification port of a vsock link served by
// a user-space device: hybrid.HostPath(ep.Path, sdnotify.Port), mode 0600.
// A failure only loses the notifications (logged): the link itself works.
func (h *Host) attachNotify(a *attachment) {
	if h.cfg.Notify == nil || !viaHybrid(&a.ep) {
		return
	}
	path := hybrid.HostPath(a.ep.Path, sdnotify.Port)
	ln, err := listenUnix(path)
	if err != nil {
		h.cfg.Logger.Warn("linkhost: no systemd notification socket for this instance", "instance", a.uuid, "err", err)
		return
	}
	a.notifyLn = ln
	id := Identity{InstanceUUID: a.uuid, Link: contract.LinkVsock}
	h.wg.Add(1)
	go h.acceptNotify(ln, a.done, "instance "+a.uuid, func(c net.Conn) { h.serveNotify(a, c, id) })
}

// listenVsockNotify listens on the host CID's notification port when the
// kernel's vsock runs; connections are tied to the instance their peer CID
// was attached with. The port is fixed (the guest learns it at boot), so a
// second daemon on the host does without (logged).
func (h *Host) listenVsockNotify() {
	if h.cfg.Notify == nil || h.vsock == nil {
		return
	}
	ln, err := h.cfg.ListenVsock(sdnotify.Port)
	if err != nil {
		h.cfg.Logger.Warn("linkhost: no systemd notification port on vsock", "port", sdnotify.Port, "err", err)
		return
	}
	h.vsockNotify = ln
	h.wg.Add(1)
	go h.acceptNotify(ln, nil, "vsock port", func(c net.Conn) {
		var a *attachment
		if addr, ok := c.RemoteAddr().(*vsock.Addr); ok {
			h.mu.Lock()
			a = h.attached[h.byCID[addr.ContextID]]
			h.mu.Unlock()
		}
		if a == nil {
			h.cfg.Logger.Warn("linkhost: systemd notification from an unknown guest", "peer", c.RemoteAddr())
			c.Close()
			return
		}
		h.serveNotify(a, c, Identity{InstanceUUID: a.uuid, Link: contract.LinkVsock})
	})
}

// acceptNotify accepts on a notification listener until done (nil: only
// the host's end) or the host closes, handing each connection to serve;
// after a temporary error (EMFILE and the like) it backs off and retries,
// after any other it logs and stops (the link itself is not affected).
// The caller has done h.wg.Add(1).
func (h *Host) acceptNotify(ln net.Listener, done <-chan struct{}, what string, serve func(net.Conn)) {
	defer h.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-done:
				return
			case <-h.done:
				return
			default:
			}
			if temporary(err) {
				if !h.sleep(minAcceptBackoff*10, done) {
					return
				}
				continue
			}
			h.cfg.Logger.Warn("linkhost: systemd notification listener stopped accepting", "listener", what, "err", err)
			return
		}
		serve(c)
	}
}

// serveNotify reads one notification from c in a goroutine of its own and
// hands it to Config.Notify, unless the instance is over its budget (then c
// is closed at once). The message ends where the guest shuts its side
// down; a message over sdnotify.MaxMessage, one that does not end within
// notifyReadTimeout, or one that does not parse closes c and is dropped.
// Nothing but a well-formed message reaches the handler: not the
// connection's end, not its absence.
func (h *Host) serveNotify(a *attachment, c net.Conn, id Identity) {
	lim := a.notify
	if lim.live.Add(1) > maxNotifyConns || !lim.limiter.Allow() {
		lim.live.Add(-1)
		c.Close()
		if !lim.warned.Swap(true) {
			h.cfg.Logger.Warn("linkhost: instance sends too many systemd notifications, closing them unread", "instance", id.InstanceUUID)
		}
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer lim.live.Add(-1)
		fin := make(chan struct{})
		defer close(fin)
		go func() { // a detach or Close ends a connection still reading
			select {
			case <-fin:
			case <-a.done:
			case <-h.done:
			}
			c.Close()
		}()
		m, err := readNotification(c, time.Now().Add(notifyReadTimeout))
		if err != nil {
			h.cfg.Logger.Warn("linkhost: dropping a systemd notification", "instance", id.InstanceUUID, "err", err)
			return
		}
		lim.warned.Store(false)
		h.cfg.Notify.Notify(id, m)
	}()
}

// readNotification reads c to its end (at most sdnotify.MaxMessage bytes,
// until deadline) and parses what it read.
func readNotification(c net.Conn, deadline time.Time) (sdnotify.Message, error) {
	_ = c.SetReadDeadline(deadline)
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(c, sdnotify.MaxMessage+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return sdnotify.Message{}, fmt.Errorf("reading notification: no end within %s (%d bytes)", notifyReadTimeout, n)
	case err != nil:
		return sdnotify.Message{}, fmt.Errorf("reading notification: %w", err)
	case n > sdnotify.MaxMessage:
		return sdnotify.Message{}, fmt.Errorf("reading notification: %w: over %d bytes", sdnotify.ErrMalformed, sdnotify.MaxMessage)
	}
	return sdnotify.Parse(buf.Bytes())
}
