// Package transport is the guest side of a guest link: how the agent listens
// for the daemon (port 8443) and dials the daemon's advertised port.
//
// Link specs:
//   - "vsock": AF_VSOCK; listen on VMADDR_CID_ANY:<port>, dial <cid>:<port>.
//   - "hybrid:<uds>": Firecracker-style hybrid vsock; listen through the VMM
//     socket <uds> (hybrid.Listen(uds).Port(port)), dial the host's socket
//     hybrid.HostPath(uds, port) directly (the CID is ignored).
//   - "serial:<port-name>": streams multiplexed over a virtio-serial port.
//     It is provided by link/serialmux, which registers the "serial" scheme
//     with Register from an init function; a binary that does not import it
//     gets ErrNotBuilt.
package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/mdlayher/vsock"
)

// Guest is the guest side of a link. Listen and Dial may be called
// concurrently; Listen is called once per port.
type Guest interface {
	// Listen listens for host connections to port.
	Listen(port uint32) (net.Listener, error)
	// Dial connects to the host at cid:port (cid is ignored by links that
	// have no addressing of their own).
	Dial(ctx context.Context, cid, port uint32) (net.Conn, error)
	// Kind returns the scheme of the link: "vsock", "hybrid", "serial".
	Kind() string
}

// Sentinel errors of Parse.
var (
	// ErrUnknownLink is returned for a spec whose scheme is not known.
	ErrUnknownLink = errors.New("unknown link")
	// ErrNotBuilt is returned for a known scheme whose implementation is not
	// linked into this binary (e.g. "serial" without link/serialmux).
	ErrNotBuilt = errors.New("link not built in")
	// ErrBadSpec is returned for a malformed spec of a known scheme.
	ErrBadSpec = errors.New("malformed link spec")
)

// Factory builds a Guest from the argument of a spec (the part after
// "<scheme>:").
type Factory func(arg string) (Guest, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes scheme available to Parse. It is meant for init functions
// of link implementations outside this package (link/serialmux registers
// "serial"). Registering "vsock" or "hybrid" or the same scheme twice
// panics.
func Register(scheme string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if scheme == "vsock" || scheme == "hybrid" || registry[scheme] != nil {
		panic(fmt.Sprintf("transport: scheme %q registered twice", scheme))
	}
	registry[scheme] = f
}

// Parse returns the Guest link described by spec: "vsock", "hybrid:<uds>"
// or "serial:<port-name>".
func Parse(spec string) (Guest, error) {
	scheme, arg, hasArg := strings.Cut(spec, ":")
	switch scheme {
	case "vsock":
		if hasArg {
			return nil, fmt.Errorf("parsing link %q: %w: vsock takes no argument", spec, ErrBadSpec)
		}
		return VSock{}, nil
	case "hybrid":
		if arg == "" {
			return nil, fmt.Errorf("parsing link %q: %w: want hybrid:<uds path>", spec, ErrBadSpec)
		}
		return &Hybrid{UDS: arg}, nil
	}
	registryMu.RLock()
	f := registry[scheme]
	registryMu.RUnlock()
	switch {
	case f != nil:
		g, err := f(arg)
		if err != nil {
			return nil, fmt.Errorf("parsing link %q: %w", spec, err)
		}
		return g, nil
	case scheme == "serial":
		return nil, fmt.Errorf("parsing link %q: %w: serial needs link/serialmux", spec, ErrNotBuilt)
	default:
		return nil, fmt.Errorf("parsing link %q: %w (want vsock, hybrid:<uds> or serial:<port>)", spec, ErrUnknownLink)
	}
}

// CIDAny is VMADDR_CID_ANY: listen on every context ID.
const CIDAny = 0xFFFFFFFF

// VSock is the AF_VSOCK link.
type VSock struct{}

var _ Guest = VSock{}

// Listen listens on VMADDR_CID_ANY:port.
func (VSock) Listen(port uint32) (net.Listener, error) {
	l, err := vsock.ListenContextID(CIDAny, port, nil)
	if err != nil {
		return nil, fmt.Errorf("listening on vsock port %d: %w", port, err)
	}
	return l, nil
}

// Dial connects to cid:port.
func (VSock) Dial(ctx context.Context, cid, port uint32) (net.Conn, error) {
	c, err := vsock.DialContext(ctx, cid, port, nil)
	if err != nil {
		return nil, fmt.Errorf("dialing vsock %d:%d: %w", cid, port, err)
	}
	return c, nil
}

// Kind returns "vsock".
func (VSock) Kind() string { return "vsock" }

// Hybrid is the hybrid vsock link through the VMM socket UDS.
type Hybrid struct {
	// UDS is the VMM's Unix socket.
	UDS string

	mu   sync.Mutex
	l    *hybrid.Listener
	open int
}

var _ Guest = (*Hybrid)(nil)

// Listen serves port on the VMM socket, creating the socket on first use.
// Closing the returned listener stops serving the port; the VMM socket is
// closed when the last port listener is closed.
func (h *Hybrid) Listen(port uint32) (net.Listener, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l == nil {
		l, err := hybrid.Listen(h.UDS)
		if err != nil {
			return nil, err
		}
		h.l = l
	}
	h.open++
	return &hybridPort{Listener: h.l.Port(port), h: h}, nil
}

// Dial connects to the host's socket for port (hybrid.HostPath); cid is
// ignored.
func (h *Hybrid) Dial(ctx context.Context, _ uint32, port uint32) (net.Conn, error) {
	var d net.Dialer
	path := hybrid.HostPath(h.UDS, port)
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dialing hybrid host socket %s: %w", path, err)
	}
	return c, nil
}

// Kind returns "hybrid".
func (h *Hybrid) Kind() string { return "hybrid" }

// hybridPort closes the shared VMM socket with its last port.
type hybridPort struct {
	net.Listener
	h    *Hybrid
	once sync.Once
}

func (p *hybridPort) Close() error {
	err := p.Listener.Close()
	p.once.Do(func() {
		p.h.mu.Lock()
		defer p.h.mu.Unlock()
		p.h.open--
		if p.h.open == 0 && p.h.l != nil {
			if cerr := p.h.l.Close(); err == nil {
				err = cerr
			}
			p.h.l = nil
		}
	})
	return err
}
