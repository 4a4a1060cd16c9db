package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Certificate is a trusted TLS client certificate: the trust store's entry
// (the Store keeps it as it is) and how the service shows it. It has no
// wire form of its own: the admin API answers api.Certificate, db keeps a
// private row.
type Certificate struct {
	Name        string
	Fingerprint string // SHA-256 of the DER, lowercase hex
	Certificate string // PEM
	AddedAt     time.Time
	AddedBy     string
	Role        string // RoleAdmin or RoleViewer
}

// Fingerprint returns the SHA-256 of a certificate's DER in lowercase hex,
// the form the trust store and the CLI use.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// NormalizeFingerprint lowercases fp and drops colons and a "sha256:"
// prefix; it refuses anything but 64 hex digits (errdefs.ErrInvalid).
func NormalizeFingerprint(fp string) (string, error) {
	f := strings.ToLower(strings.TrimSpace(fp))
	f = strings.TrimPrefix(f, "sha256:")
	f = strings.ReplaceAll(f, ":", "")
	if len(f) != 64 {
		return "", fmt.Errorf("invalid fingerprint %q: want the 64 hex digits of a SHA-256: %w", fp, errdefs.ErrInvalid)
	}
	if _, err := hex.DecodeString(f); err != nil {
		return "", fmt.Errorf("invalid fingerprint %q: not hexadecimal: %w", fp, errdefs.ErrInvalid)
	}
	return f, nil
}

// ParseCertificatePEM parses exactly one PEM CERTIFICATE block.
func ParseCertificatePEM(data []byte) (*x509.Certificate, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("invalid certificate: no PEM block found: %w", errdefs.ErrInvalid)
	}
	if block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("invalid certificate: PEM block is %q, want CERTIFICATE: %w", block.Type, errdefs.ErrInvalid)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("invalid certificate: data after the first PEM block (one certificate at a time): %w", errdefs.ErrInvalid)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("invalid certificate: %v: %w", err, errdefs.ErrInvalid)
	}
	return cert, nil
}

// certificateOf is a stored certificate as the service shows it: a copy,
// its role RoleAdmin if stored before roles.
func certificateOf(c *Certificate) Certificate {
	out := *c
	out.Role = roleOf(c.Role)
	return out
}

// AddCertificate trusts the PEM certificate under name (default: its
// common name if that is a valid name, else "client-" and the first 8
// digits of its fingerprint) with role (RoleAdmin or RoleViewer; ""
// means RoleAdmin). by says who added it.
func (s *Service) AddCertificate(ctx context.Context, name string, pemData []byte, by, role string) (*Certificate, error) {
	role, err := ValidateRole(role)
	if err != nil {
		return nil, err
	}
	cert, err := ParseCertificatePEM(pemData)
	if err != nil {
		return nil, err
	}
	fp := Fingerprint(cert)
	if name == "" {
		name = cert.Subject.CommonName
		if ValidateName(name) != nil {
			name = "client-" + fp[:8]
		}
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if now := s.cfg.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("invalid certificate %q: it expired on %s: %w", name, cert.NotAfter.UTC().Format(time.RFC3339), errdefs.ErrInvalid)
	}
	rec := &Certificate{
		Name:        name,
		Fingerprint: fp,
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
		AddedAt:     s.now(),
		AddedBy:     by,
		Role:        role,
	}
	if err := s.store.AddCertificate(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("certificate %s is already trusted: %w", fp, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("trusting certificate %q: %w", name, err)
	}
	out := certificateOf(rec)
	s.log.Info("certificate trusted", "name", name, "fingerprint", fp, "role", role, "by", by)
	return &out, nil
}

// Certificates lists the trusted certificates.
func (s *Service) Certificates(ctx context.Context) ([]Certificate, error) {
	list, err := s.store.Certificates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Certificate, 0, len(list))
	for _, c := range list {
		out = append(out, certificateOf(c))
	}
	return out, nil
}

// Certificate returns the trusted certificate with fingerprint fp (any
// form NormalizeFingerprint accepts); errdefs.ErrNotFound if none.
func (s *Service) Certificate(ctx context.Context, fp string) (*Certificate, error) {
	f, err := NormalizeFingerprint(fp)
	if err != nil {
		return nil, err
	}
	c, err := s.store.Certificate(ctx, f)
	if err != nil {
		return nil, err
	}
	out := certificateOf(c)
	return &out, nil
}

// RemoveCertificate stops trusting the certificate with fingerprint fp.
func (s *Service) RemoveCertificate(ctx context.Context, fp string) error {
	f, err := NormalizeFingerprint(fp)
	if err != nil {
		return err
	}
	if err := s.store.DeleteCertificate(ctx, f); err != nil {
		return err
	}
	s.log.Info("certificate removed from the trust store", "fingerprint", f)
	return nil
}

// AuthenticateCertificate returns the trusted certificate that cert is
// (byte for byte), or an error wrapping errdefs.ErrUnauthorized.
func (s *Service) AuthenticateCertificate(ctx context.Context, cert *x509.Certificate) (*Certificate, error) {
	if cert == nil {
		return nil, unauthorized("no client certificate")
	}
	fp := Fingerprint(cert)
	c, err := s.store.Certificate(ctx, fp)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unauthorized("client certificate %s is not trusted", fp)
	}
	if err != nil {
		return nil, fmt.Errorf("checking client certificate %s: %w", fp, err)
	}
	if !sameHash(c.Fingerprint, fp) {
		return nil, unauthorized("client certificate %s is not trusted", fp)
	}
	now := s.cfg.Now()
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, unauthorized("client certificate %s is not valid now", fp)
	}
	out := certificateOf(c)
	return &out, nil
}

// ValidateName checks an identity or certificate name: the grammar of
// instance names (a DNS label: letters, digits and hyphens, 1 to 63
// characters, starting with a letter, not ending with a hyphen).
func ValidateName(name string) error { return validateName("name", name) }

// validateName checks name against the grammar of ValidateName; errors
// call it what ("name", "instance name").
func validateName(what, name string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid %s %q: %s: %w", what, name, why, errdefs.ErrInvalid)
	}
	switch {
	case name == "":
		return fmt.Errorf("invalid %s: the name is empty: %w", what, errdefs.ErrInvalid)
	case len(name) > 63:
		return bad(fmt.Sprintf("longer than 63 characters (%d)", len(name)))
	}
	for i, r := range name {
		if r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return bad(fmt.Sprintf("character %q at position %d is not a letter, digit or hyphen", r, i))
		}
	}
	switch {
	case name[0] >= '0' && name[0] <= '9':
		return bad("must not start with a digit")
	case name[0] == '-':
		return bad("must not start with a hyphen")
	case name[len(name)-1] == '-':
		return bad("must not end with a hyphen")
	}
	return nil
}
