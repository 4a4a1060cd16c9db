// Package pki keeps the daemon's TLS certificate and the per-instance key
// pairs of the guest link under the daemon's state directory.
//
// Layout (keys 0600, directories 0700):
//
//	<state-dir>/pki/server.crt, server.key                 the daemon's certificate
//	<state-dir>/instances/<name>/agent.crt, agent.key      the agent's pair (its server
//	                                                       cert on 8443 and its client
//	                                                       cert towards the daemon)
//	<state-dir>/instances/<name>/daemon-client.crt, .key   the daemon's client pair
//	                                                       for calling that agent
//
// Pairs are generated once, when first needed, and loaded afterwards. A pair
// that exists only in part, or does not parse, is an error (ErrCorrupt): the
// store never replaces existing files silently.
//
// GeneratePair is not called by the daemon (the Store generates its pairs
// itself): it gives tests a Pair of the same kind without a state directory.
package pki

import (
	"bytes"
	"crypto/ed25519"
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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// ErrCorrupt reports key-pair files that exist but cannot be used: a
// certificate without its key (or the reverse), unparsable PEM, or a key
// that does not match its certificate.
var ErrCorrupt = errors.New("corrupt key pair")

// Validity is how long generated certificates are valid.
const Validity = 10 * 365 * 24 * time.Hour

// backdate is subtracted from NotBefore so that a guest whose clock runs a
// little behind the host's still accepts a fresh certificate.
const backdate = time.Hour

// File names inside the state directory.
const (
	DaemonDir        = "pki"
	DaemonCertFile   = "server.crt"
	DaemonKeyFile    = "server.key"
	InstancesDir     = "instances"
	AgentCertFile    = "agent.crt"
	AgentKeyFile     = "agent.key"
	ClientCertFile   = "daemon-client.crt"
	ClientKeyFile    = "daemon-client.key"
	daemonCommonName = "guestlink"
)

// Pair is one certificate with its private key. The certificate is kept as
// DER and parsed only when asked for (Cert): a daemon of 10,000 instances
// caches 20,000 pairs, and a parsed certificate costs ~2.7 KB of heap
// where its DER is ~400 bytes; TLS handshakes and Equal need only the DER.
type Pair struct {
	CertPEM []byte          // the certificate, PEM
	KeyPEM  []byte          // the private key, PEM (PKCS#8)
	DER     []byte          // the certificate, DER (as a TLS peer presents it)
	TLS     tls.Certificate // ready for tls.Config.Certificates (no Leaf)
}

// InstanceCerts are the key pairs of one instance.
type InstanceCerts struct {
	Name   string // the instance name the certificates name
	Agent  *Pair  // the agent's server and client certificate
	Client *Pair  // the daemon's client certificate for calling the agent
}

// Store loads and creates key pairs under a state directory. It is safe for
// concurrent use; instance pairs are cached in memory once loaded.
type Store struct {
	dir    string
	now    func() time.Time
	daemon *Pair

	mu    sync.Mutex
	cache map[string]*InstanceCerts
}

// Option changes how a Store is opened.
type Option func(*Store)

// Open opens the store under stateDir, loading the daemon's certificate or
// generating it if <stateDir>/pki holds none.
func Open(stateDir string, opts ...Option) (*Store, error) {
	s := &Store{dir: stateDir, now: time.Now, cache: map[string]*InstanceCerts{}}
	for _, o := range opts {
		o(s)
	}
	dir := filepath.Join(stateDir, DaemonDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki directory %q: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting pki directory %q: %w", dir, err)
	}
	p, err := s.loadOrCreate(dir, DaemonCertFile, DaemonKeyFile, func() (*x509.Certificate, error) {
		host, _ := os.Hostname()
		names := []string{daemonCommonName}
		if host != "" && host != daemonCommonName {
			names = append(names, host)
		}
		return s.template(daemonCommonName, names, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	})
	if err != nil {
		return nil, fmt.Errorf("daemon certificate: %w", err)
	}
	s.daemon = p
	return s, nil
}

// Daemon returns the daemon's certificate: the server certificate of the
// devlxd listener, advertised to agents.
func (s *Store) Daemon() *Pair { return s.daemon }

// Instance returns the key pairs of the named instance, generating them on
// first use. Existing files are loaded, never replaced.
func (s *Store) Instance(name string) (*InstanceCerts, error) {
	return s.instance(name, true)
}

// LoadInstance returns the key pairs of the named instance without creating
// them; it fails with errdefs.ErrNotFound when they were never generated.
func (s *Store) LoadInstance(name string) (*InstanceCerts, error) {
	return s.instance(name, false)
}

// DeleteInstance removes the named instance's key pairs from disk and memory.
// Deleting pairs that do not exist succeeds. Other files in the instance's
// directory are left alone; the directory is removed when it is left empty.
func (s *Store) DeleteInstance(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cache, name)
	dir := s.instanceDir(name)
	for _, f := range []string{AgentCertFile, AgentKeyFile, ClientCertFile, ClientKeyFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deleting key pairs of instance %q: %w", name, err)
		}
	}
	// Only succeeds when empty; anything else in it belongs to someone else.
	_ = os.Remove(dir)
	return nil
}

func (s *Store) instanceDir(name string) string {
	return filepath.Join(s.dir, InstancesDir, name)
}

func (s *Store) instance(name string, create bool) (*InstanceCerts, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cache[name]; ok {
		return c, nil
	}
	dir := s.instanceDir(name)
	if !create {
		if _, err := os.Stat(filepath.Join(dir, AgentCertFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("key pairs of instance %q: %w", name, errdefs.ErrNotFound)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating directory of instance %q: %w", name, err)
	}
	agent, err := s.loadOrCreate(dir, AgentCertFile, AgentKeyFile, func() (*x509.Certificate, error) {
		return s.template(name, []string{name}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	})
	if err != nil {
		return nil, fmt.Errorf("agent certificate of instance %q: %w", name, err)
	}
	client, err := s.loadOrCreate(dir, ClientCertFile, ClientKeyFile, func() (*x509.Certificate, error) {
		return s.template(name, []string{name}, x509.ExtKeyUsageClientAuth)
	})
	if err != nil {
		return nil, fmt.Errorf("daemon client certificate of instance %q: %w", name, err)
	}
	c := &InstanceCerts{Name: name, Agent: agent, Client: client}
	s.cache[name] = c
	return c, nil
}

// validName rejects names that could leave the instances directory.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("instance name %q: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

// loadOrCreate loads dir/certFile and dir/keyFile, or generates a new pair
// from tmpl when neither exists.
func (s *Store) loadOrCreate(dir, certFile, keyFile string, tmpl func() (*x509.Certificate, error)) (*Pair, error) {
	certPath, keyPath := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist)
	switch {
	case certErr != nil && !certMissing:
		return nil, fmt.Errorf("reading %q: %w", certPath, certErr)
	case keyErr != nil && !keyMissing:
		return nil, fmt.Errorf("reading %q: %w", keyPath, keyErr)
	case certMissing && keyMissing:
		t, err := tmpl()
		if err != nil {
			return nil, err
		}
		certPEM, keyPEM, err = generate(t)
		if err != nil {
			return nil, err
		}
		// The key goes first and the certificate last, so an interrupted
		// write leaves a key without certificate: reported, never reused.
		if err := WriteFile(keyPath, keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := WriteFile(certPath, certPEM, 0o644); err != nil {
			return nil, err
		}
	case certMissing:
		return nil, fmt.Errorf("%q exists without %q: %w", keyPath, certPath, ErrCorrupt)
	case keyMissing:
		return nil, fmt.Errorf("%q exists without %q: %w", certPath, keyPath, ErrCorrupt)
	}
	p, err := ParsePair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading %q: %w", certPath, err)
	}
	return p, nil
}

// ParsePair parses a PEM certificate and its PEM private key; it fails with
// ErrCorrupt when they do not parse or do not belong together. The pair
// keeps the certificate as DER, not parsed (see Pair).
func ParsePair(certPEM, keyPEM []byte) (*Pair, error) {
	tc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if tc.Leaf == nil {
		// X509KeyPair parses the leaf since Go 1.23; make sure the
		// certificate parses whatever the GODEBUG, so Cert cannot fail.
		if _, err := x509.ParseCertificate(tc.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	tc.Leaf = nil // parsed on use (Cert); crypto/tls needs only the DER
	return &Pair{CertPEM: certPEM, KeyPEM: keyPEM, DER: tc.Certificate[0], TLS: tc}, nil
}

// Cert parses the pair's certificate. Each call parses it anew (ParsePair
// checked that it parses); callers on a hot path use DER or Equal.
func (p *Pair) Cert() *x509.Certificate {
	c, err := x509.ParseCertificate(p.DER)
	if err != nil {
		// Unreachable for a Pair from ParsePair or a Store.
		panic(fmt.Sprintf("pki: certificate of a parsed pair no longer parses: %v", err))
	}
	return c
}

// template returns a certificate template naming cn, valid for Validity
// from now (backdated a little).
func (s *Store) template(cn string, dnsNames []string, usage ...x509.ExtKeyUsage) (*x509.Certificate, error) {
	now := s.now()
	return newTemplate(cn, dnsNames, now.Add(-backdate), now.Add(Validity), usage)
}

func newTemplate(cn string, dnsNames []string, notBefore, notAfter time.Time, usage []x509.ExtKeyUsage) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"guestlink"}},
		DNSNames:              dnsNames,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
	}, nil
}

// GeneratePair creates a new self-signed Ed25519 pair naming cn, valid from
// notBefore to notAfter, for the given uses. The daemon's own pairs come from
// a Store; this is for callers (and tests) that need a pair in memory.
func GeneratePair(cn string, notBefore, notAfter time.Time, usage ...x509.ExtKeyUsage) (*Pair, error) {
	tmpl, err := newTemplate(cn, []string{cn}, notBefore, notAfter, usage)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := generate(tmpl)
	if err != nil {
		return nil, err
	}
	return ParsePair(certPEM, keyPEM)
}

// generate creates an Ed25519 key and a self-signed certificate from tmpl.
// Ed25519 keeps TLS handshakes cheap: a guest link may see many of them.
func generate(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// WriteFile writes data to path atomically (temporary file, synced, then
// renamed) with the given mode: a key is never readable with a wider mode,
// and a crash leaves the old file or the new one.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	return nil
}

// Equal reports whether cert is byte for byte the certificate of p.
func (p *Pair) Equal(cert *x509.Certificate) bool {
	return p != nil && cert != nil && bytes.Equal(p.DER, cert.Raw)
}

// ValidAt reports whether cert is within its validity period at t.
func ValidAt(cert *x509.Certificate, t time.Time) bool {
	return !t.Before(cert.NotBefore) && !t.After(cert.NotAfter)
}

// AgentCertDER returns the agent certificate of the named instance as DER,
// loading but never generating it: errdefs.ErrNotFound when the instance
// has none. The caller must not modify it.
func (s *Store) AgentCertDER(name string) ([]byte, error) {
	c, err := s.LoadInstance(name)
	if err != nil {
		return nil, err
	}
	return c.Agent.DER, nil
}
