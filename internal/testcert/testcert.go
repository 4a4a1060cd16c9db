// Package testcert generates self-signed certificates and their keys for
// tests, in the one place every test of the module takes them from.
package testcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"testing"
	"time"
)

// Options say what a certificate is for. The zero value gives an ECDSA
// P-256 key and a certificate valid from an hour ago for a day, for TLS
// servers and clients, naming its common name, localhost, 127.0.0.1 and ::1.
type Options struct {
	// NotBefore and NotAfter bound the validity (defaults: now - 1h and
	// now + 24h).
	NotBefore, NotAfter time.Time
	// Usage is the extended key usage (default: server and client auth).
	Usage []x509.ExtKeyUsage
	// Ed25519 makes an Ed25519 key instead of ECDSA P-256.
	Ed25519 bool
}

// Pair is a generated certificate and its private key, parsed and in PEM.
type Pair struct {
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// Key is the private key.
	Key crypto.Signer
	// CertPEM is the certificate in PEM ("CERTIFICATE").
	CertPEM []byte
	// KeyPEM is the key in PKCS #8 PEM ("PRIVATE KEY").
	KeyPEM []byte
}

// New returns a pair for cn with the default Options.
func New(t testing.TB, cn string) Pair {
	t.Helper()
	return NewWith(t, cn, Options{})
}

// NewWith returns a pair for cn made as o says. It fails the test when
// generating the key or the certificate fails.
func NewWith(t testing.TB, cn string, o Options) Pair {
	t.Helper()
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(24 * time.Hour)
	}
	if o.Usage == nil {
		o.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	var (
		key crypto.Signer
		err error
	)
	if o.Ed25519 {
		_, key, err = ed25519.GenerateKey(rand.Reader)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatalf("testcert: generating key for %q: %v", cn, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testcert: generating serial for %q: %v", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{cn, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.Usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("testcert: creating certificate for %q: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcert: parsing certificate for %q: %v", cn, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcert: encoding key for %q: %v", cn, err)
	}
	return Pair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// TLS returns the pair as a tls.Certificate (with its Leaf).
func (p Pair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

// Fingerprint returns the SHA-256 of the certificate's DER bytes in hex.
func (p Pair) Fingerprint() string {
	sum := sha256.Sum256(p.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// WriteFiles writes the certificate to certFile (0644) and the key to
// keyFile (0600), failing the test on error.
func (p Pair) WriteFiles(t testing.TB, certFile, keyFile string) {
	t.Helper()
	if err := os.WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		t.Fatalf("testcert: writing %s: %v", certFile, err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		t.Fatalf("testcert: writing %s: %v", keyFile, err)
	}
}
