package client

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Fingerprint returns the SHA-256 of a certificate's DER in lowercase hex,
// the form guestlink shows and pins.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// NormalizeFingerprint lowercases fp and drops colons and a "sha256:"
// prefix; anything but 64 hex digits is errdefs.ErrInvalid.
func NormalizeFingerprint(fp string) (string, error) {
	f := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(fp)), "sha256:"), ":", "")
	if _, err := hex.DecodeString(f); err != nil || len(f) != 64 {
		return "", fmt.Errorf("invalid fingerprint %q: want the 64 hex digits of a SHA-256: %w", fp, errdefs.ErrInvalid)
	}
	return f, nil
}

// ErrFingerprintMismatch is returned (wrapped) when the daemon's
// certificate is not the pinned one.
var ErrFingerprintMismatch = errors.New("server certificate fingerprint mismatch")

// clientTLS is the TLS configuration of an https client.
func clientTLS(serverName string, opts Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if opts.Certificate != nil {
		cert := *opts.Certificate
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	if opts.ServerFingerprint != "" {
		want, err := NormalizeFingerprint(opts.ServerFingerprint)
		if err != nil {
			return nil, err
		}
		// The pin replaces chain verification: a self-signed certificate
		// is trusted exactly when it is the pinned one.
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return fmt.Errorf("no server certificate: %w", ErrFingerprintMismatch)
			}
			sum := sha256.Sum256(raw[0])
			if got := hex.EncodeToString(sum[:]); got != want {
				return fmt.Errorf("%w: got %s, pinned %s", ErrFingerprintMismatch, got, want)
			}
			return nil
		}
	}
	return cfg, nil
}

// authorize adds the bearer token to a request's headers.
func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

// ServerCertificate connects to an https:// daemon without verifying it
// and returns the certificate it presents, for a first contact that shows
// its fingerprint to the user.
func ServerCertificate(ctx context.Context, addr string) (*x509.Certificate, error) {
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("reading the certificate of %q: want https://host:port: %w", addr, errdefs.ErrInvalid)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate of %s: daemon %w: %w", addr, errdefs.ErrUnavailable, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("reading the certificate of %s: none presented: %w", addr, errdefs.ErrUnavailable)
	}
	return certs[0], nil
}
