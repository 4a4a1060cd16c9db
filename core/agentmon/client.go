package agentmon

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/guestlink/guestlink/core/pki"
)

// agentClient calls one instance's agent on its link port: TLS with the
// daemon's per-instance client certificate, pinning the agent certificate.
// It holds no transport between calls: calls are rare (advertisements,
// events) and each uses a fresh connection, so the TLS configuration and
// the http.Transport are made per call rather than kept for each of
// thousands of idle guests.
type agentClient struct {
	links Links
	uuid  string
	certs *pki.InstanceCerts
	now   func() time.Time
}

// maxAnswer is how much of an agent's answer is read (for error messages).
const maxAnswer = 4 << 10

func newAgentClient(links Links, uuid string, certs *pki.InstanceCerts, now func() time.Time) *agentClient {
	return &agentClient{links: links, uuid: uuid, certs: certs, now: now}
}

// httpClient returns a client for one call.
func (c *agentClient) httpClient() *http.Client { return c.newHTTPClient(false) }

// sessionClient returns a client for a few calls in a row on one
// connection (a report's GET /1.0 and GET /1.0/state: one TLS handshake,
// not one per request); the caller closes its idle connection at the end
// (CloseIdleConnections).
func (c *agentClient) sessionClient() *http.Client { return c.newHTTPClient(true) }

// newHTTPClient returns a client that dials the agent; keepAlive keeps its
// connection between its calls.
func (c *agentClient) newHTTPClient(keepAlive bool) *http.Client {
	certs, now := c.certs, c.now
	cfg := &tls.Config{
		Certificates: []tls.Certificate{certs.Client.TLS},
		ServerName:   certs.Name,
		MinVersion:   tls.VersionTLS12,
		// X25519 alone on the host-local link (docs/security.md): a new
		// daemon advertises to every agent at once.
		CurvePreferences: []tls.CurveID{tls.X25519},
		// The agent's certificate is self-signed and pinned: verified in
		// VerifyConnection instead of against a CA.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("agent presented no certificate")
			}
			peer := cs.PeerCertificates[0]
			if !certs.Agent.Equal(peer) {
				return fmt.Errorf("agent certificate of instance %q does not match", certs.Name)
			}
			if !pki.ValidAt(peer, now()) {
				return fmt.Errorf("agent certificate of instance %q is outside its validity", certs.Name)
			}
			return nil
		},
	}
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			raw, err := c.links.DialAgent(ctx, c.uuid)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, fmt.Errorf("TLS handshake with agent of instance %q: %w", certs.Name, err)
			}
			return tc, nil
		},
		// An agent restart kills kept connections: a fresh one per call
		// is simplest, and nothing stays open once the call is done (a
		// session client's caller closes it).
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 1,
	}
	return &http.Client{Transport: tr}
}

// do sends a request with a JSON body to the agent on a connection of its
// own and fails unless it answers 2xx.
func (c *agentClient) do(ctx context.Context, method, path string, body []byte) error {
	hc := c.httpClient()
	defer hc.CloseIdleConnections()
	_, err := c.doOn(ctx, hc, method, path, body, nil)
	return err
}

// doOn is do through hc with extra request headers, returning the
// answer's body; the answer is read to its end (up to maxAnswer), so a
// session client's connection serves the next call.
func (c *agentClient) doOn(ctx context.Context, hc *http.Client, method, path string, body []byte, header map[string]string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "https://agent"+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %w", method, path, c.certs.Name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %w", method, path, c.certs.Name, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("%s %s on agent of instance %q: %s: %q", method, path, c.certs.Name, resp.Status, bytes.TrimSpace(answer))
	}
	return answer, nil
}
