package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/internal/httpdrain"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/web"
)

// Files of the self-signed HTTPS certificate under the state directory.
const (
	HTTPSCertFile = "pki/https.crt"
	HTTPSKeyFile  = "pki/https.key"
)

// tcpState is the daemon's TCP side: the authentication service, the
// listeners and the dashboard's base URL.
type tcpState struct {
	auth        *auth.Service
	stopPurge   context.CancelFunc
	purgeDone   chan struct{}
	httpsLn     net.Listener
	fingerprint string // SHA-256 of the HTTPS certificate, hex

	mu      sync.Mutex
	dashURL string
}

// CheckListen refuses listener settings that would expose the admin API
// without TLS: plain --http is allowed on loopback addresses only.
func CheckListen(cfg Config) error {
	if cfg.HTTPAddr != "" {
		host, _, err := net.SplitHostPort(cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("--http %q: %w: %w", cfg.HTTPAddr, err, errdefs.ErrInvalid)
		}
		if !isLoopback(host) {
			return fmt.Errorf("--http %q is not a loopback address: plain HTTP is refused there; serve TLS with --https %s (and --tls-cert/--tls-key, or a self-signed certificate the daemon makes): %w",
				cfg.HTTPAddr, cfg.HTTPAddr, errdefs.ErrInvalid)
		}
	}
	if cfg.HTTPSAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.HTTPSAddr); err != nil {
			return fmt.Errorf("--https %q: %w: %w", cfg.HTTPSAddr, err, errdefs.ErrInvalid)
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together: %w", errdefs.ErrInvalid)
	}
	if cfg.TLSCert != "" && cfg.HTTPSAddr == "" {
		return fmt.Errorf("--tls-cert needs --https ADDR: %w", errdefs.ErrInvalid)
	}
	for _, h := range cfg.HTTPHosts {
		if !validHostName(h) {
			return fmt.Errorf("--http-host %q: want a DNS name such as guestlink.example.com (the listener's IP addresses are accepted anyway): %w", h, errdefs.ErrInvalid)
		}
	}
	return nil
}

// validHostName reports whether h is a DNS name: dot-separated labels of
// letters, digits and hyphens, not an IP address.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 || net.ParseIP(h) != nil {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
				return false
			}
		}
	}
	return true
}

// isLoopback reports whether host (an address's host part) is localhost or
// a loopback IP.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startAuth starts the authentication service and its purge loop.
func (d *Daemon) startAuth() error {
	as, ok := d.store.(auth.Store)
	if !ok {
		return fmt.Errorf("the store %T keeps no authentication state: %w", d.store, errdefs.ErrNotSupported)
	}
	svc, err := auth.New(auth.Config{Store: as, Logger: d.log.With("component", "auth")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.tcp.auth, d.tcp.stopPurge, d.tcp.purgeDone = svc, cancel, make(chan struct{})
	go func() {
		defer close(d.tcp.purgeDone)
		svc.Run(ctx, auth.DefaultPurgeInterval)
	}()
	return nil
}

// DashboardURL returns the dashboard's base URL ("" without a TCP listener).
func (d *Daemon) DashboardURL() string {
	d.tcp.mu.Lock()
	defer d.tcp.mu.Unlock()
	return d.tcp.dashURL
}

// listenTCP serves the admin API and the dashboard on --http (plain,
// loopback) and --https (TLS), and logs a one-time dashboard login URL.
func (d *Daemon) listenTCP(ctx context.Context) error {
	if d.cfg.HTTPAddr == "" && d.cfg.HTTPSAddr == "" {
		return nil
	}
	// Every write has its own deadline (tcpConns): the dashboard's live
	// stream lives as long as its client reads, a client that stops
	// reading is dropped after the write timeout.
	fc := adminapi.FiberConfig(0)
	fc.WriteTimeout = d.cfg.WriteTimeout
	app := fiber.New(fc)
	// Security headers first, so Host refusals and unknown paths carry them.
	app.Use(web.SecurityHeaders)
	app.Use(d.api.CheckHost) // DNS rebinding: the dashboard is guarded like the API
	d.api.Register(app)
	d.dash = web.New(web.Config{
		Sessions:  d.tcp.auth, // no session, no data
		Instances: d.service,
		Events:    d.bus,
		Backends:  d.plugins,
		Consoles:  d.mgr,
		Editor:    d.mgr,
		Images:    d.images,
		Guests:    d.monitor,
		Exec:      d.monitor, // the instance page's terminal
		Files:     d.monitor, // the instance page's file download
		Logger:    d.log.With("component", "web"),

		DefaultBackend: d.cfg.DefaultBackend,
	})
	d.dash.Register(app)
	d.web = app
	d.webDrain = httpdrain.Track(app.Server())

	var httpURL, httpsURL string
	if d.cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", d.cfg.HTTPAddr, err)
		}
		d.tcpLn = ln
		httpURL = "http://" + urlHost(ln.Addr(), nil)
		served := d.tcpConns(ln, nil, "http")
		go d.serve("http", func() error { return d.webDrain.Serve(func() error { return app.Listener(served) }) })
	}
	if d.cfg.HTTPSAddr != "" {
		cert, err := d.httpsCertificate()
		if err != nil {
			return err
		}
		d.tcp.fingerprint = certFingerprint(cert.Leaf)
		ln, err := net.Listen("tcp", d.cfg.HTTPSAddr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", d.cfg.HTTPSAddr, err)
		}
		tlsConfig := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			// Client certificates are asked for and checked against the
			// trust store per request; bearer clients send none.
			ClientAuth: tls.RequestClientCert,
		}
		tln := d.tcpConns(ln, func(ln net.Listener) net.Listener { return tls.NewListener(ln, tlsConfig) }, "https")
		d.tcp.httpsLn = tln
		httpsURL = "https://" + urlHost(ln.Addr(), d.cfg.HTTPHosts)
		go d.serve("https", func() error { return d.webDrain.Serve(func() error { return app.Listener(tln) }) })
		d.log.Info("serving the admin API and the dashboard over TLS", "addr", ln.Addr().String(),
			"certificate_fingerprint", d.tcp.fingerprint)
	}
	base := httpURL
	if base == "" {
		base = httpsURL
	}
	d.tcp.mu.Lock()
	d.tcp.dashURL = base
	d.tcp.mu.Unlock()

	// The daemon starts even when no login URL can be made (the cap of
	// live login tokens is reached): guestlink dashboard makes one later.
	token, expires, err := d.tcp.auth.NewLogin(ctx, "daemon start")
	if err != nil {
		d.log.Warn("no dashboard login URL at start; run guestlink dashboard for one", "err", err)
		return nil
	}
	d.log.Info("dashboard login URL", "url", adminapi.LoginURL(base, token), "expires", expires.Format(time.RFC3339))
	return nil
}

// urlHost is the host:port of a URL reaching addr: a wildcard address is
// named by the first of names, else localhost.
func urlHost(addr net.Addr, names []string) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	port := strconv.Itoa(ta.Port)
	switch {
	case len(names) > 0:
		return net.JoinHostPort(names[0], port)
	case ta.IP == nil || ta.IP.IsUnspecified():
		return net.JoinHostPort("localhost", port)
	}
	return net.JoinHostPort(ta.IP.String(), port)
}

// certFingerprint returns the SHA-256 of a certificate's DER in hex.
func certFingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// httpsCertificate loads --tls-cert/--tls-key, or the self-signed pair
// under the state directory, creating it (key 0600) the first time.
func (d *Daemon) httpsCertificate() (tls.Certificate, error) {
	certPath, keyPath := d.cfg.TLSCert, d.cfg.TLSKey
	if certPath == "" {
		certPath = filepath.Join(d.cfg.StateDir, HTTPSCertFile)
		keyPath = filepath.Join(d.cfg.StateDir, HTTPSKeyFile)
		_, cerr := os.Stat(certPath)
		_, kerr := os.Stat(keyPath)
		switch {
		case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
			var ips []net.IP
			if host, _, err := net.SplitHostPort(d.cfg.HTTPSAddr); err == nil {
				if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
					ips = append(ips, ip)
				}
			}
			if err := writeSelfSigned(certPath, keyPath, d.cfg.HTTPHosts, ips); err != nil {
				return tls.Certificate{}, fmt.Errorf("creating the self-signed HTTPS certificate: %w", err)
			}
			d.log.Info("created a self-signed HTTPS certificate", "cert", certPath)
		case cerr != nil || kerr != nil:
			return tls.Certificate{}, fmt.Errorf("HTTPS certificate %s and key %s: both or neither must exist: %w", certPath, keyPath, errors.Join(cerr, kerr))
		}
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading the HTTPS certificate %s: %w", certPath, err)
	}
	return cert, nil
}

// writeSelfSigned creates an ECDSA P-256 self-signed server certificate for
// localhost, the host's name, the loopback addresses, names and ips, valid
// 10 years.
func writeSelfSigned(certPath, keyPath string, names []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "guestlinkd", Organization: []string{"guestlink"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              append([]string{"localhost"}, names...),
		IPAddresses:           append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ips...),
	}
	if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return err
	}
	if err := writePrivate(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})); err != nil {
		return err
	}
	return writePrivate(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// writePrivate writes data to a new file of mode 0600 (never widened by
// the umask) and syncs it.
func writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// closeTCP stops the TCP side: the purge loop (listeners close with the
// fiber app).
func (d *Daemon) closeTCP() {
	if d.tcp.httpsLn != nil {
		_ = d.tcp.httpsLn.Close()
	}
	if d.tcp.stopPurge != nil {
		d.tcp.stopPurge()
		<-d.tcp.purgeDone
	}
}

// The authentication service is the dashboard's session store.
var _ web.Sessions = (*auth.Service)(nil)
