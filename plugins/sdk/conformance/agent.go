package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// This file is the kit's Agent subtest: it runs the real guestlink-agent in
// a guest of the plugin and plays the daemon's side of the guest link
// (docs/plugins.md, "What the agent needs"), with the standard library
// only, so the kit stays usable outside this repository.

// hostLinkPort is the link port the kit listens on as the daemon, beside
// the hybrid socket (Path + "_" + port), and advertises to the agent.
const hostLinkPort = 8443

// agentLinkPort is the port the agent serves its link API on (daemon to
// agent), reached through the hybrid socket with "CONNECT 8443".
const agentLinkPort = 8443

// Ring words the agent writes (docs/guest-link.md, "Ring words").
const (
	wordStarted   = "STARTED"
	wordConnected = "CONNECTED"
)

// keyPair is a generated certificate and key in PEM, with the
// certificate's DER to pin.
type keyPair struct {
	certPEM, keyPEM, der []byte
}

// newKeyPair generates a self-signed ECDSA P-256 pair for name.
func newKeyPair(name string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating the %s key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return keyPair{}, fmt.Errorf("generating the %s serial: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return keyPair{}, fmt.Errorf("making the %s certificate: %w", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encoding the %s key: %w", name, err)
	}
	return keyPair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		der:     der,
	}, nil
}

func (k keyPair) tls() (tls.Certificate, error) { return tls.X509KeyPair(k.certPEM, k.keyPEM) }

// advertisement is the daemon's advertisement (agent.conf, and the body of
// PUT /1.0 on the agent's link port).
type advertisement struct {
	CID         uint32 `json:"cid"`
	Port        uint32 `json:"port"`
	Certificate string `json:"certificate"`
	Devlxd      bool   `json:"devlxd"`
}

// linkHost is the daemon's side of one guest's hybrid link: a TLS server
// on Path_8443 that answers the agent's requests (GET /1.0, PATCH /1.0)
// and records the states the guest declares.
type linkHost struct {
	agent, daemonClient, daemon keyPair

	mu      sync.Mutex
	states  []string      // states PATCHed by the guest, in order
	ready   chan struct{} // closed at the first Ready
	srv     *http.Server
	advJSON []byte
}

func newLinkHost() (*linkHost, error) {
	h := &linkHost{ready: make(chan struct{})}
	var err error
	if h.agent, err = newKeyPair("agent"); err != nil {
		return nil, err
	}
	if h.daemonClient, err = newKeyPair("daemon-client"); err != nil {
		return nil, err
	}
	if h.daemon, err = newKeyPair("daemon"); err != nil {
		return nil, err
	}
	h.advJSON, err = json.Marshal(advertisement{CID: 2, Port: hostLinkPort, Certificate: string(h.daemon.certPEM), Devlxd: true})
	if err != nil {
		return nil, fmt.Errorf("encoding the advertisement: %w", err)
	}
	return h, nil
}

// files returns the config drive files the daemon sends for the guest.
func (h *linkHost) files() []sdk.File {
	return []sdk.File{
		{Path: sdk.AgentFileCert, Mode: 0o644, Data: h.agent.certPEM},
		{Path: sdk.AgentFileKey, Mode: 0o600, Data: h.agent.keyPEM},
		{Path: sdk.AgentFileServerCert, Mode: 0o644, Data: h.daemonClient.certPEM},
		{Path: sdk.AgentFileConf, Mode: 0o644, Data: h.advJSON},
	}
}

// listen serves the daemon's link API on path (the hybrid socket's
// Path_8443) until close.
func (h *linkHost) listen(path string) error {
	cert, err := h.daemon.tls()
	if err != nil {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening as the daemon on %s: %w", path, err)
	}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 5 * time.Second}
	tln := tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	go func() { _ = h.srv.Serve(tln) }()
	return nil
}

func (h *linkHost) close() {
	if h.srv != nil {
		_ = h.srv.Close()
	}
}

// envelope writes an LXD envelope: sync with metadata, or an error.
func envelope(w http.ResponseWriter, code int, metadata any, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	body := map[string]any{"type": "sync", "status": "Success", "status_code": 200, "operation": "",
		"error_code": 0, "error": "", "metadata": metadata}
	if code >= 400 {
		body = map[string]any{"type": "error", "status": "", "status_code": 0, "operation": "",
			"error_code": code, "error": msg, "metadata": nil}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// serve answers the agent as the daemon's devlxd handlers would, for the
// two requests the kit needs: GET /1.0 (the agent's check of an
// advertisement, and wait-host) and PATCH /1.0 (the guest's declaration).
func (h *linkHost) serve(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !bytes.Equal(r.TLS.PeerCertificates[0].Raw, h.agent.der) {
		envelope(w, http.StatusUnauthorized, nil, "Unauthorized")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/1.0":
		envelope(w, http.StatusOK, map[string]any{"api_version": "1.0", "location": "conformance",
			"instance_type": "virtual-machine", "state": "Started"}, "")
	case r.Method == http.MethodPatch && r.URL.Path == "/1.0":
		var put struct {
			State string `json:"state"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&put); err != nil {
			envelope(w, http.StatusBadRequest, nil, "Invalid request body: "+err.Error())
			return
		}
		h.mu.Lock()
		h.states = append(h.states, put.State)
		if put.State == "Ready" && !h.isReady() {
			close(h.ready)
		}
		h.mu.Unlock()
		envelope(w, http.StatusOK, nil, "")
	default:
		envelope(w, http.StatusNotFound, nil, "Not Found")
	}
}

// isReady reports whether the guest declared Ready; h.mu is held.
func (h *linkHost) isReady() bool {
	select {
	case <-h.ready:
		return true
	default:
		return false
	}
}

// declared returns the states the guest declared so far.
func (h *linkHost) declared() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.states...)
}

// advertise sends the advertisement to the agent's link port through the
// hybrid socket uds, as the daemon does when a guest runs: the agent checks
// it with GET /1.0 on the kit and writes CONNECTED.
func (h *linkHost) advertise(ctx context.Context, uds string) error {
	cert, err := h.daemonClient.tls()
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialHybrid(ctx, uds, agentLinkPort) },
		TLSClientConfig: &tls.Config{
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, //nolint:gosec // the agent's certificate is pinned below
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, h.agent.der) {
					return errors.New("the agent's certificate is not agent.crt")
				}
				return nil
			},
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "https://agent/1.0", bytes.NewReader(h.advJSON))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("PUT /1.0 to the agent through %s: %w", uds, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /1.0 to the agent: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// dialHybrid connects to port of the guest through the hybrid vsock socket
// uds (Firecracker's protocol: "CONNECT <port>\n", answered "OK <n>\n").
func dialHybrid(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", uds)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %d\n", port); err != nil {
		conn.Close()
		return nil, err
	}
	// Read the answer byte by byte: what follows the line is the stream's.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 32 {
		if _, err := conn.Read(b); err != nil {
			conn.Close()
			return nil, fmt.Errorf("hybrid socket %s: no answer to CONNECT %d (nothing listens on it?): %w", uds, port, err)
		}
		line = append(line, b[0])
		if b[0] == '\n' {
			break
		}
	}
	if !strings.HasPrefix(string(line), "OK ") {
		conn.Close()
		return nil, fmt.Errorf("hybrid socket %s: answer %q to CONNECT %d, want OK", uds, line, port)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// ringWatch reads a guest's ring through the plugin's ReadRing and
// collects the words the agent wrote.
type ringWatch struct {
	s    *suite
	g    *guest
	data bytes.Buffer
}

// waitWord reads the ring until word shows as a line, or the kit's
// timeout passes; it returns an error naming what was read.
func (r *ringWatch) waitWord(ctx context.Context, word string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		data, err := r.s.b.ReadRing(ctx, r.g.h, 4096)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("ReadRing(%q): %w", r.g.spec.Name, err)
		}
		r.data.Write(data)
		sc := bufio.NewScanner(bytes.NewReader(r.data.Bytes()))
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == word {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s in the ring within %v (ReadRing gave %q so far)", word, r.s.cfg.Timeout, r.data.String())
		case <-tick.C:
		}
	}
}

// testAgent runs the real agent in a guest (Config.AgentSpec) and checks
// the link a guest needs to reach Ready: the agent's ring words reach the
// plugin's ReadRing (STARTED, then CONNECTED once the kit, as the daemon,
// advertised itself through the hybrid socket) and the guest's Ready
// declaration reaches the daemon through the agent.
func (s *suite) testAgent(t *testing.T) {
	if !s.info.Has(sdk.CapLinkHybrid) {
		if s.info.HasLink() {
			t.Skip("the kit drives the agent over a hybrid link only; this backend's vsock or serial link is checked by the daemon's tests")
		}
		t.Fatal("the backend announces no guest link (link-hybrid, link-vsock or link-serial): its guests can never reach Ready")
	}
	if !s.info.Has(sdk.CapRingBuffer) {
		t.Fatalf("the backend announces %s but not %s: the daemon learns that a guest's agent started only from its ring", sdk.CapLinkHybrid, sdk.CapRingBuffer)
	}
	if s.cfg.AgentSpec == nil {
		t.Fatal("Config.AgentSpec is nil: give the spec of a guest that runs guestlink-agent and declares Ready (docs/plugins.md, \"What the agent needs\")")
	}
	host, err := newLinkHost()
	if err != nil {
		t.Fatal(err)
	}
	defer host.close()
	g := s.create(t, s.b, func(name, uuid string) *sdk.GuestSpec {
		spec := s.cfg.AgentSpec(name, uuid)
		if spec != nil {
			spec.Files = append(spec.Files, host.files()...)
		}
		return spec
	})
	s.start(t, s.b, g)

	ctx, cancel := s.ctx()
	defer cancel()
	ep, err := s.b.LinkEndpoint(ctx, g.h)
	if err != nil {
		t.Fatalf("LinkEndpoint(%q): %v", g.spec.Name, err)
	}
	if err := sdk.CheckLinkEndpoint(s.info, ep); err != nil {
		t.Fatalf("LinkEndpoint(%q) = %+v: %v", g.spec.Name, ep, err)
	}
	if ep.Kind != sdk.LinkHybrid {
		t.Skipf("the guest's link is %s; the kit drives the agent over a hybrid link only", ep.Kind)
	}
	if err := host.listen(ep.Path + "_" + strconv.Itoa(hostLinkPort)); err != nil {
		t.Fatal(err)
	}

	ring := &ringWatch{s: s, g: g}
	if err := ring.waitWord(ctx, wordStarted); err != nil {
		t.Fatalf("the agent's STARTED never reached the plugin's ring: %v. The backend must start guestlink-agent in the guest "+
			"(sdk.AgentPath) and relay what it writes to its ring port to ReadRing (docs/plugins.md, \"What the agent needs\")", err)
	}
	if err := host.advertise(ctx, ep.Path); err != nil {
		t.Fatalf("the agent wrote STARTED, but the kit cannot reach its link port through the hybrid socket %s: %v", ep.Path, err)
	}
	if err := ring.waitWord(ctx, wordConnected); err != nil {
		t.Fatalf("the agent took the advertisement, but CONNECTED never reached the plugin's ring: %v", err)
	}
	select {
	case <-host.ready:
	case <-ctx.Done():
		t.Fatalf("the guest never declared Ready through its agent within %v (declared so far: %q): AgentSpec's guest must "+
			"run guestlink-agent ready once the agent runs, and the backend must give the agent the config drive files "+
			"(GuestSpec.Files) and its link (docs/plugins.md, \"What the agent needs\")", s.cfg.Timeout, host.declared())
	}
}
