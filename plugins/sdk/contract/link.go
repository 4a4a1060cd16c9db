package contract

import "fmt"

// LinkCapability returns the capability that announces link kind k, or ""
// for a kind the contract does not define.
func LinkCapability(k LinkKind) Capability {
	switch k {
	case LinkHybrid:
		return CapLinkHybrid
	case LinkVsock:
		return CapLinkVsock
	case LinkSerial:
		return CapLinkSerial
	}
	return ""
}

// HasLink reports whether the backend announced any link kind. A backend
// that announced none has no guest link: its guests run without an agent
// connection (never Ready) and its LinkEndpoint returns ErrNotSupported.
func (i *Info) HasLink() bool {
	return i.Has(CapLinkHybrid) || i.Has(CapLinkVsock) || i.Has(CapLinkSerial)
}

// CheckLinkEndpoint applies the link rule the daemon and the conformance
// kit share to what a backend described by info returned from LinkEndpoint
// for a running guest: the kind is a defined one that Info announced, a
// vsock CID is a guest CID (3 up to 2^32-2), and a hybrid or serial
// endpoint has a socket path. A violation is ErrInvalid; the daemon then
// runs the guest without a link (and logs why), the kit fails the plugin.
func CheckLinkEndpoint(info *Info, ep *LinkEndpoint) error {
	if ep == nil {
		return fmt.Errorf("link endpoint: none returned: %w", ErrInvalid)
	}
	switch c := LinkCapability(ep.Kind); {
	case c == "":
		return fmt.Errorf("link endpoint: kind %q is not a link kind: %w", ep.Kind, ErrInvalid)
	case info == nil || !info.Has(c):
		return fmt.Errorf("link endpoint: kind %q without capability %q in Info: %w", ep.Kind, c, ErrInvalid)
	case ep.Kind == LinkVsock && (ep.CID < 3 || ep.CID == 0xffffffff):
		return fmt.Errorf("link endpoint: vsock CID %d is reserved: %w", ep.CID, ErrInvalid)
	case ep.Kind != LinkVsock && ep.Path == "":
		return fmt.Errorf("link endpoint: %s without a socket path: %w", ep.Kind, ErrInvalid)
	}
	return nil
}
