// Package agenttest is the test kit of the agent: generated certificates, a
// small fake daemon on the hybrid link, a real agent process, a ring-port
// reader and a latency reporter for benchmarks. It is meant for tests and
// benchmarks of the agent; the daemon's own end-to-end tests use the real
// daemon instead of Daemon.
package agenttest

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/internal/testcert"
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

// NewKeyPair generates a self-signed ECDSA P-256 key pair for name
// (internal/testcert).
func NewKeyPair(t testing.TB, name string) KeyPair {
	t.Helper()
	p := testcert.New(t, name)
	return KeyPair{CertPEM: p.CertPEM, KeyPEM: p.KeyPEM}
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
