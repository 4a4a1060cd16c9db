package qemuvm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/ringline"
	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestSerialLinkToAgent boots a guest and talks TLS to the agent's port 8443
// through the serial link endpoint, as the daemon does.
func TestSerialLinkToAgent(t *testing.T) {
	e := newBootEnv(t, LayoutCurrent, "")
	if !e.img.HasAgent {
		t.Skip("the guest image has no agent (cmd/guestlink-agent was missing when make guest-image ran)")
	}
	e.start(t, false)
	e.waitWord(t, ringline.Started, 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep, err := e.b.LinkEndpoint(ctx, e.h)
	if err != nil || ep.Kind != sdk.LinkSerial {
		t.Fatalf("LinkEndpoint = %+v, %v", ep, err)
	}
	host, err := serialmux.DialHost(ctx, ep.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	// The test's config drive uses one key pair for the agent and as the
	// daemon's client certificate (server.crt), so it can authenticate.
	var cfgFiles = map[string][]byte{}
	for _, f := range e.spec.Files {
		cfgFiles[f.Path] = f.Data
	}
	pair, err := tls.X509KeyPair(cfgFiles["agent.crt"], cfgFiles["agent.key"])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := host.Dial(ctx, 8443)
	if err != nil {
		t.Fatalf("Dial 8443 over the serial link: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	tc := tls.Client(conn, &tls.Config{
		Certificates:       []tls.Certificate{pair},
		InsecureSkipVerify: true, // pinned below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], pair.Certificate[0]) {
				return errors.New("agent certificate is not the pinned one")
			}
			return nil
		},
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("TLS handshake with the agent over the serial link: %v", err)
	}
	fmt.Fprintf(tc, "GET /1.0 HTTP/1.1\r\nHost: agent\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("reading the agent's answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /1.0 on the agent = %s", resp.Status)
	}
}
