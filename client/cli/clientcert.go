package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

// clientPair loads the CLI's client key pair, creating it (key 0600) the
// first time; it returns the pair and the certificate's path.
func clientPair(dir string) (*tls.Certificate, string, error) {
	certPath, keyPath := filepath.Join(dir, ClientCertFile), filepath.Join(dir, ClientKeyFile)
	_, cerr := os.Stat(certPath)
	_, kerr := os.Stat(keyPath)
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		if err := writeClientPair(dir, certPath, keyPath); err != nil {
			return nil, "", fmt.Errorf("creating the client certificate: %w", err)
		}
	case cerr != nil || kerr != nil:
		return nil, "", fmt.Errorf("client certificate %s and key %s: both or neither must exist: %w", certPath, keyPath, errors.Join(cerr, kerr))
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, "", fmt.Errorf("loading the client certificate %s: %w", certPath, err)
	}
	return &pair, certPath, nil
}

// clientName is the common name of a new client certificate: "user-host"
// in the grammar of identity names, so the daemon can use it as the
// certificate's default name.
func clientName() string {
	var parts []string
	if u, err := user.Current(); err == nil {
		parts = append(parts, u.Username)
	}
	if h, err := os.Hostname(); err == nil {
		parts = append(parts, strings.Split(h, ".")[0])
	}
	var b strings.Builder
	for _, r := range strings.Join(parts, "-") {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-0123456789")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	if name == "" {
		return "guestlink-client"
	}
	return name
}

// writeClientPair creates an ECDSA P-256 self-signed client certificate.
func writeClientPair(dir, certPath, keyPath string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: clientName(), Organization: []string{"guestlink"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
