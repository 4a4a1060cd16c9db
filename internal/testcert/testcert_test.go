package testcert_test

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"
)

// TestPairs checks both key kinds: the PEM forms load as a TLS pair, the
// validity and usage follow the options, and written files load again.
func TestPairs(t *testing.T) {
	nb := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	na := nb.Add(time.Hour)
	for _, tt := range []struct {
		name string
		o    testcert.Options
	}{
		{"ecdsa defaults", testcert.Options{}},
		{"ed25519 expired client", testcert.Options{Ed25519: true, NotBefore: nb, NotAfter: na, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := testcert.NewWith(t, "unit", tt.o)
			if _, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
				t.Fatalf("X509KeyPair: %v", err)
			}
			if p.Cert.Subject.CommonName != "unit" || p.TLS().Leaf != p.Cert || len(p.Fingerprint()) != 64 {
				t.Fatalf("pair = %+v", p.Cert.Subject)
			}
			if !tt.o.NotBefore.IsZero() && (!p.Cert.NotBefore.Equal(nb) || !p.Cert.NotAfter.Equal(na)) {
				t.Fatalf("validity %v..%v, want %v..%v", p.Cert.NotBefore, p.Cert.NotAfter, nb, na)
			}
			dir := t.TempDir()
			crt, key := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
			p.WriteFiles(t, crt, key)
			if _, err := tls.LoadX509KeyPair(crt, key); err != nil {
				t.Fatalf("LoadX509KeyPair: %v", err)
			}
		})
	}
}
