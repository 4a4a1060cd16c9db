package linkhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/mdlayher/vsock"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// HostCID is the vsock context ID of the host.
const HostCID = 2

// portTries is how many random ports are tried before giving up.
const portTries = 64

// VsockListenFunc listens for vsock connections on the host CID at port.
type VsockListenFunc func(port uint32) (net.Listener, error)

// VsockDialFunc connects to a guest's vsock port.
type VsockDialFunc func(ctx context.Context, cid, port uint32) (net.Conn, error)

func deviceExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// listenRandom listens on random ports from pick until one is free.
func listenRandom(listen VsockListenFunc, pick func() uint32) (uint32, net.Listener, error) {
	var err error
	for range portTries {
		port := pick()
		var ln net.Listener
		ln, err = listen(port)
		if err == nil {
			return port, ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, nil, fmt.Errorf("listening on vsock port %d: %w", port, err)
		}
	}
	return 0, nil, fmt.Errorf("listening on vsock: no free port in %d tries: %w", portTries, err)
}

// Vsock reports whether the vsock listener runs.
func (h *Host) Vsock() bool { return h.vsock != nil }

// attachVsock checks that the vsock listener runs and that the guest CID
// is one a guest may have; Attach then maps the CID to the instance, and
// acceptVsock hands on the connections from it.
func (h *Host) attachVsock(a *attachment) error {
	if h.vsock == nil {
		return fmt.Errorf("attaching vsock link of instance %s: %w", a.uuid, errdefs.ErrNotSupported)
	}
	if a.ep.CID < 3 || a.ep.CID == 0xffffffff {
		return fmt.Errorf("attaching vsock link of instance %s: guest CID %d: %w", a.uuid, a.ep.CID, errdefs.ErrInvalid)
	}
	return nil
}

// acceptVsock accepts on the vsock listener and ties each connection to the
// instance its peer CID was attached with; others are closed. Temporary
// errors are retried with backoff: the listener serves every guest.
func (h *Host) acceptVsock() {
	defer h.wg.Done()
	bo := acceptBackoff()
	for {
		c, err := h.vsock.Accept()
		if err != nil {
			select {
			case <-h.done:
				return
			default:
			}
			if temporary(err) {
				delay := bo.NextBackOff()
				h.cfg.Logger.Debug("linkhost: temporary vsock accept error, retrying", "err", err, "in", delay)
				if !h.sleep(delay, nil) {
					return
				}
				continue
			}
			h.cfg.Logger.Error("linkhost: vsock listener failed", "err", err)
			return
		}
		bo.Reset()
		addr, ok := c.RemoteAddr().(*vsock.Addr)
		h.mu.Lock()
		var a *attachment
		if ok {
			a = h.attached[h.byCID[addr.ContextID]]
		}
		h.mu.Unlock()
		if a == nil {
			h.cfg.Logger.Warn("linkhost: vsock connection from an unknown guest", "peer", c.RemoteAddr())
			c.Close()
			continue
		}
		h.admit(a, c, Identity{InstanceUUID: a.uuid, Link: contract.LinkVsock})
	}
}
