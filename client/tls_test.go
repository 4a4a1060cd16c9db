package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// selfSigned returns a certificate good for a TLS client or server.
func selfSigned(t *testing.T, cn string) (tls.Certificate, []byte) {
	t.Helper()
	p := testcert.New(t, cn)
	return p.TLS(), p.CertPEM
}

// TestHTTPS checks the client over TLS: a pinned server certificate and a
// trusted client certificate for requests and the events websocket; a
// wrong pin and an unpinned self-signed daemon are refused.
func TestHTTPS(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{Auth: true})
	serverCert, _ := selfSigned(t, "daemon")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = srv.API.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequestClientCert}))
	}()
	url := "https://" + ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := client.ServerCertificate(ctx, url)
	if err != nil || client.Fingerprint(got) != client.Fingerprint(serverCert.Leaf) {
		t.Fatalf("ServerCertificate = %v", err)
	}
	pin := client.Fingerprint(serverCert.Leaf)
	mine, minePEM := selfSigned(t, "laptop")
	if _, err := srv.Auth.AddCertificate(ctx, "", minePEM, "test", ""); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name string
		opts client.Options
		want func(error) bool
	}{
		{"pinned and trusted", client.Options{Certificate: &mine, ServerFingerprint: strings.ToUpper(pin)}, func(err error) bool { return err == nil }},
		{"wrong pin", client.Options{Certificate: &mine, ServerFingerprint: strings.Repeat("0", 64)},
			func(err error) bool { return errors.Is(err, client.ErrFingerprintMismatch) }},
		{"no pin, self-signed", client.Options{Certificate: &mine}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "certificate") }},
		{"pinned, no client certificate", client.Options{ServerFingerprint: pin}, func(err error) bool {
			var se *client.StatusError
			return errors.As(err, &se) && se.Code == 401
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.NewWithOptions(url, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Instances(ctx, client.InstanceFilter{})
			if !tt.want(err) {
				t.Fatalf("Instances: %v", err)
			}
		})
	}

	c, err := client.NewWithOptions(url, client.Options{Certificate: &mine, ServerFingerprint: pin})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	evc, errc := c.Events(ectx, client.EventFilter{})
	if _, err := c.Create(ctx, api.InstancesPost{Name: "s1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	collect(t, evc, errc, 1)
	if by := srv.Instances.LastRequestor(); by.Protocol != "tls" || by.Username != "laptop" {
		t.Fatalf("requestor = %+v", by)
	}
	fp := client.Fingerprint(mine.Leaf)
	if got, err := c.Certificate(ctx, fp); err != nil || got.Fingerprint != fp {
		t.Fatalf("Certificate(%s) = %+v, %v", fp, got, err)
	}
	if _, err := client.NewWithOptions(url, client.Options{ServerFingerprint: "xyz"}); err == nil {
		t.Fatal("a malformed pin was accepted")
	}
	if _, err := client.NewWithOptions(url, client.Options{Token: "a\nb"}); err == nil {
		t.Fatal("a token with a line break was accepted")
	}
}
