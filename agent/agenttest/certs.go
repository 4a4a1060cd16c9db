// Package agenttest is the test kit of the agent: generated certificates, a
// small fake daemon on the hybrid link, a real agent process, a ring-port
// reader and a latency reporter for benchmarks. It is meant for tests and
// benchmarks of the agent; the daemon's own end-to-end tests use the real
// daemon instead of Daemon.
package agenttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// KeyPair is a PEM certificate and key.
type KeyPair struct {
	// CertPEM is the certificate.
	CertPEM []byte
	// KeyPEM is the private key.
	KeyPEM []byte
}

// TLS returns the pair as a tls.Certificate.
func (k KeyPair) TLS() tls.Certificate {
	c, err := tls.X509KeyPair(k.CertPEM, k.KeyPEM)
	if err != nil {
		panic(fmt.Sprintf("agenttest: loading generated key pair: %v", err))
	}
	return c
}

// DER returns the certificate's DER bytes.
func (k KeyPair) DER() []byte {
	b, _ := pem.Decode(k.CertPEM)
	return b.Bytes
}

// NewKeyPair generates a self-signed ECDSA P-256 key pair for name.
func NewKeyPair(t testing.TB, name string) KeyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating key for %s: %v", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("generating serial: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("creating certificate for %s: %v", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("encoding key for %s: %v", name, err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Certs is the per-instance material: the agent's pair, the daemon's client
// pair (server.crt in the guest) and the daemon's link server pair (the
// advertised certificate).
type Certs struct {
	// Agent is agent.crt/agent.key.
	Agent KeyPair
	// DaemonClient is the daemon's client pair for calling the agent.
	DaemonClient KeyPair
	// Daemon is the daemon's server pair on the link.
	Daemon KeyPair
}

// NewCerts generates a fresh set.
func NewCerts(t testing.TB) *Certs {
	return &Certs{
		Agent:        NewKeyPair(t, "agent"),
		DaemonClient: NewKeyPair(t, "daemon-client"),
		Daemon:       NewKeyPair(t, "daemon"),
	}
}

// WriteConfigDir writes agent.crt, agent.key (0600) and server.crt to dir.
func (c *Certs) WriteConfigDir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("creating config dir: %v", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"agent.crt", c.Agent.CertPEM, 0o644},
		{"agent.key", c.Agent.KeyPEM, 0o600},
		{"server.crt", c.DaemonClient.CertPEM, 0o644},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			t.Fatalf("writing %s: %v", f.name, err)
		}
	}
}
