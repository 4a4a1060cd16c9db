package upstream_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/transport"
)

func setup(t *testing.T, perRequest bool) (*agenttest.Daemon, *upstream.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "glu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uds := filepath.Join(dir, "vm.sock")
	certs := agenttest.NewCerts(t)
	d := agenttest.StartDaemon(t, certs, uds, 5000)
	link, err := transport.Parse("hybrid:" + uds)
	if err != nil {
		t.Fatal(err)
	}
	c := upstream.New(upstream.Options{Link: link, Certificate: certs.Agent.TLS(), PerRequestTLS: perRequest})
	t.Cleanup(c.CloseIdleConnections)
	return d, c
}

func get(t *testing.T, c *upstream.Client) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env, err := c.Do(ctx, http.MethodGet, "/1.0", nil)
	if err == nil && env.StatusCode != http.StatusOK {
		t.Fatalf("GET /1.0 = %+v", env)
	}
	return err
}

func TestNoAdvertisement(t *testing.T) {
	_, c := setup(t, false)
	if err := get(t, c); !errors.Is(err, upstream.ErrNoAdvertisement) {
		t.Fatalf("Do without advertisement = %v, want ErrNoAdvertisement", err)
	}
}

func TestPinning(t *testing.T) {
	d, c := setup(t, false)
	adv := d.Advertisement()
	adv.Certificate = string(agenttest.NewKeyPair(t, "impostor").CertPEM)
	if err := c.SetAdvertisement(adv); err != nil {
		t.Fatal(err)
	}
	if err := get(t, c); !errors.Is(err, upstream.ErrUnreachable) || errors.Is(err, upstream.ErrShed) {
		t.Fatalf("Do with another pinned certificate = %v, want ErrUnreachable, not ErrShed", err)
	}
}

func TestReuse(t *testing.T) {
	tests := []struct {
		name        string
		perRequest  bool
		wantConns   int
		wantResumed int
	}{
		// Five requests on one kept-alive connection, then after the pool
		// is dropped a new connection resumes the TLS session.
		{"reuse", false, 2, 1},
		{"per request", true, 6, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, c := setup(t, tt.perRequest)
			if err := c.SetAdvertisement(d.Advertisement()); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				if err := get(t, c); err != nil {
					t.Fatalf("GET %d: %v", i, err)
				}
			}
			c.CloseIdleConnections()
			if err := get(t, c); err != nil {
				t.Fatalf("GET after pool drop: %v", err)
			}
			d.Lock()
			conns, resumed := d.Conns, d.Resumed
			d.Unlock()
			if conns != tt.wantConns || resumed != tt.wantResumed {
				t.Fatalf("daemon saw %d connections, %d resumed requests; want %d, %d", conns, resumed, tt.wantConns, tt.wantResumed)
			}
		})
	}
}
