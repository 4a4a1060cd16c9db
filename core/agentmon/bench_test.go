package agentmon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// BenchmarkGuestGetInfo compares GET /1.0 as a guest application sees it
// (the real agent's /dev/lxd/sock, proxied over the hybrid link to the
// daemon's devlxd handlers) with the same request answered by the daemon's
// handlers directly over a local socket (TLS and certificate checks
// included). One kept-alive client, sequential requests.
func BenchmarkGuestGetInfo(b *testing.B) {
	r := startRealAgent(b)
	unixClient := func(path string, cfg *tls.Config) *http.Client {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		if cfg != nil {
			tr.DialContext = nil
			tr.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, "unix", path)
				if err != nil {
					return nil, err
				}
				return tls.Client(c, cfg), nil
			}
		}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	// The daemon's handlers straight over a local socket.
	direct := filepath.Join(b.TempDir(), "devlxd.sock")
	ln, err := net.Listen("unix", direct)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = r.d.srv.ServeConn(c, linkhost.Identity{InstanceUUID: r.inst.UUID, Link: contract.LinkHybrid})
		}
	}()
	certs, err := r.store.LoadInstance(r.inst.Name)
	if err != nil {
		b.Fatal(err)
	}
	daemonCert := r.store.Daemon().DER
	tlsCfg := &tls.Config{
		Certificates:       []tls.Certificate{certs.Agent.TLS},
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], daemonCert) {
				return errors.New("not the daemon")
			}
			return nil
		},
	}
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"agent", unixClient(r.g.Socket(), nil), "http://lxd/1.0"},
		{"daemon", unixClient(direct, tlsCfg), "https://lxd/1.0"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat agenttest.Latency
			for b.Loop() {
				err := lat.Time(func() error {
					resp, err := bc.c.Get(bc.url)
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					_, _ = io.Copy(io.Discard, resp.Body)
					if resp.StatusCode != http.StatusOK {
						return errors.New(resp.Status)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			lat.Report(b)
		})
	}
}
