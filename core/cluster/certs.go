package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/guestlink/guestlink/core/pki"
)

// Files of a member's identity, under <state dir>/cluster/ (0700; keys 0600).
const (
	dirName      = "cluster"
	caCertFile   = "ca.crt"
	caKeyFile    = "ca.key"
	memberCert   = "member.crt"
	memberKey    = "member.key"
	identityFile = "member.json"
)

// identity is what a member keeps in its state directory.
type identity struct {
	Cluster string `json:"cluster"` // the cluster's UUID
	Name    string `json:"name"`
}

// keys is a member's key material: the cluster CA (certificate and key:
// every member can admit others, as LXD's shared cluster certificate) and
// its own member certificate.
type keys struct {
	caCert   *x509.Certificate
	caPEM    []byte
	caKeyPEM []byte
	caKey    *ecdsa.PrivateKey
	member   tls.Certificate
	leaf     *x509.Certificate
}

// fingerprint is the hex SHA-256 of a certificate's DER.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// newCA makes the cluster's CA (ECDSA P-256, ten years).
func newCA(clusterID string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the cluster CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().Add(-time.Minute)
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "guestlink cluster " + clusterID, Organization: []string{"guestlink"}},
		NotBefore:             now,
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the cluster CA: %w", err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), nil
}

// issue signs a member certificate for name with the CA: CN and a DNS
// name are the member's name (peers verify it), the IP of address (if
// any) is a SAN too; usable as server and client (mutual TLS).
func issue(k *keys, name, address string, pub any) ([]byte, error) {
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(-time.Minute)
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"guestlink cluster member"}},
		DNSNames:     []string{name},
		NotBefore:    now,
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if host, _, err := net.SplitHostPort(address); err == nil {
		if ip := net.ParseIP(host); ip != nil {
			tmpl.IPAddresses = []net.IP{ip}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, k.caCert, pub, k.caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the member certificate of %q: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newMemberKey makes a member's private key.
func newMemberKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the member key: %w", err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), nil
}

// parseCA parses the CA's certificate and key.
func parseCA(certPEM, keyPEM []byte) (*keys, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return nil, errors.New("the cluster CA certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the cluster CA certificate: %w", err)
	}
	k := &keys{caCert: cert, caPEM: certPEM, caKeyPEM: keyPEM}
	if keyPEM != nil {
		kb, _ := pem.Decode(keyPEM)
		if kb == nil {
			return nil, errors.New("the cluster CA key is not PEM")
		}
		if k.caKey, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, fmt.Errorf("parsing the cluster CA key: %w", err)
		}
	}
	return k, nil
}

// dir is the cluster directory of a state directory.
func dir(stateDir string) string { return filepath.Join(stateDir, dirName) }

// loadIdentity reads a member's identity and keys; ok is false when the
// state directory holds none.
func loadIdentity(stateDir string) (*identity, *keys, bool, error) {
	d := dir(stateDir)
	raw, err := os.ReadFile(filepath.Join(d, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("reading the cluster identity: %w", err)
	}
	var id identity
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, nil, false, fmt.Errorf("reading %s: %w", filepath.Join(d, identityFile), err)
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(d, name))
		if err != nil {
			return nil, fmt.Errorf("reading the cluster identity: %w", err)
		}
		return b, nil
	}
	caPEM, err := read(caCertFile)
	if err != nil {
		return nil, nil, false, err
	}
	caKeyPEM, err := read(caKeyFile)
	if err != nil {
		return nil, nil, false, err
	}
	k, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, false, err
	}
	certPEM, err := read(memberCert)
	if err != nil {
		return nil, nil, false, err
	}
	keyPEM, err := read(memberKey)
	if err != nil {
		return nil, nil, false, err
	}
	if k.member, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, false, fmt.Errorf("loading the member certificate: %w", err)
	}
	if k.leaf, err = x509.ParseCertificate(k.member.Certificate[0]); err != nil {
		return nil, nil, false, fmt.Errorf("parsing the member certificate: %w", err)
	}
	return &id, k, true, nil
}

// saveIdentity writes a member's identity: keys 0600 in a 0700 directory,
// the identity file last (its presence means the rest is complete).
func saveIdentity(stateDir string, id identity, caPEM, caKeyPEM, certPEM, keyPEM []byte) error {
	d := dir(stateDir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", d, err)
	}
	raw, err := json.Marshal(id)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{caCertFile, caPEM, 0o644}, {caKeyFile, caKeyPEM, 0o600}, {memberCert, certPEM, 0o644},
		{memberKey, keyPEM, 0o600}, {identityFile, raw, 0o600},
	} {
		if err := pki.WriteFile(filepath.Join(d, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
