// Package advert defines the daemon's advertisement to the agent: the body of
// PUT /1.0 on the agent's link port and the agent.conf file of the config
// drive.
package advert

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"

	"github.com/guestlink/guestlink/link/devlxdapi"
)

// MaxSize is the largest advertisement accepted, in bytes.
const MaxSize = 64 << 10

// ErrInvalid is wrapped by every validation error of Parse.
var ErrInvalid = errors.New("invalid advertisement")

// Advertisement tells the agent where and how to reach the daemon over the
// link.
type Advertisement struct {
	// CID is the vsock context ID the daemon listens on (2, the host).
	CID uint32 `json:"cid"`
	// Port is the link port the daemon listens on (1..65535).
	Port uint32 `json:"port"`
	// Certificate is the daemon's certificate (PEM) the agent pins.
	Certificate string `json:"certificate"`
	// Devlxd reports whether /dev/lxd/sock is enabled for the guest.
	Devlxd bool `json:"devlxd"`
}

// Parse decodes and validates an advertisement: a single JSON object of at
// most MaxSize bytes with no unknown fields, a port in 1..65535 and a
// certificate that is one parseable PEM "CERTIFICATE" block. Errors wrap
// ErrInvalid.
func Parse(data []byte) (*Advertisement, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d byte limit", ErrInvalid, len(data), MaxSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var a Advertisement
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	if a.Port < 1 || a.Port > 65535 {
		return nil, fmt.Errorf("%w: port %d outside 1..65535", ErrInvalid, a.Port)
	}
	if _, err := a.ParseCertificate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// ParseCertificate decodes the advertised daemon certificate. Errors wrap
// ErrInvalid.
func (a *Advertisement) ParseCertificate() (*x509.Certificate, error) {
	if a.Certificate == "" {
		return nil, fmt.Errorf("%w: certificate is missing", ErrInvalid)
	}
	block, rest := pem.Decode([]byte(a.Certificate))
	if block == nil {
		return nil, fmt.Errorf("%w: certificate is not PEM", ErrInvalid)
	}
	if block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: certificate PEM block is %q, want CERTIFICATE", ErrInvalid, block.Type)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: data after the certificate PEM block", ErrInvalid)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parsing certificate: %w", ErrInvalid, err)
	}
	return cert, nil
}

// Marshal returns the advertisement as JSON, the form Parse accepts.
func (a *Advertisement) Marshal() []byte {
	b, err := json.Marshal(a)
	if err != nil {
		// A struct of ints, a string and a bool always encodes.
		panic(fmt.Sprintf("encoding advertisement: %v", err))
	}
	return b
}

// Equal reports whether a and b advertise the same daemon endpoint,
// certificate and devlxd setting.
func (a *Advertisement) Equal(b *Advertisement) bool {
	return a != nil && b != nil && *a == *b
}

// SameDaemon reports whether a and b designate the same daemon endpoint
// (CID, port and certificate), whatever their devlxd setting. A daemon
// restart changes the port.
func (a *Advertisement) SameDaemon(b *Advertisement) bool {
	return a != nil && b != nil && a.CID == b.CID && a.Port == b.Port && a.Certificate == b.Certificate
}

// DeclarationHeader, set to "1" on a PUT /1.0 by a daemon that has no
// declaration of the guest's current boot, asks the agent to hand back the
// guest's last declaration in its answer (Answer) instead of re-sending it
// with PATCH /1.0 before answering. A daemon that sends it records the
// declaration itself; one that does not (older daemons) gets the PATCH as
// before. Unknown headers are ignored by agents that predate it, which then
// re-declare with PATCH /1.0.
const DeclarationHeader = "Guestlink-Declaration-In-Answer"

// Answer is the metadata of the agent's answer to PUT /1.0 when the daemon
// set DeclarationHeader: the guest's last declaration of this boot, if it
// made one (a daemon asks only while it has none of this boot). An answer
// without it (null metadata, or no declaration) restores nothing.
type Answer struct {
	// Declaration is the guest's last declaration, as it was PATCHed.
	Declaration *devlxdapi.StatePut `json:"declaration,omitempty"`
}
