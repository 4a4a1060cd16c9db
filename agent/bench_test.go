package agent_test

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/agent/devlxdclient"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/transport"
)

// BenchmarkGet10 compares GET /1.0 as a guest sees it through the agent's
// /dev/lxd/sock (connection reuse towards the daemon, and LXD-style TLS per
// request) with the same request sent straight to the daemon over TLS, with
// and without reuse. It reports the median and 99th percentile latency.
// Against the real daemon the same harness is driven through
// agenttest.Latency and upstream.Client.
func BenchmarkGet10(b *testing.B) {
	ctx := context.Background()
	viaAgent := func(b *testing.B, args ...string) {
		g := agenttest.NewGuest(b)
		d := agenttest.StartDaemon(b, g.Certs, g.UDS, 4200)
		agenttest.StartAgent(b, agentBin, g, args...)
		advertise(b, d)
		waitCond(b, "devlxd socket", func() bool { _, err := os.Stat(g.Socket()); return err == nil })
		c := devlxdclient.New(g.Socket())
		if _, err := devlxdclient.Get(ctx, c, "/1.0"); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		var lat agenttest.Latency
		b.ResetTimer()
		for b.Loop() {
			if err := lat.Time(func() error { _, err := devlxdclient.Get(ctx, c, "/1.0"); return err }); err != nil {
				b.Fatalf("GET /1.0: %v", err)
			}
		}
		lat.Report(b)
	}
	direct := func(b *testing.B, perRequest bool) {
		g := agenttest.NewGuest(b)
		d := agenttest.StartDaemon(b, g.Certs, g.UDS, 4201)
		link, err := transport.Parse("hybrid:" + g.UDS)
		if err != nil {
			b.Fatal(err)
		}
		up := upstream.New(upstream.Options{Link: link, Certificate: g.Certs.Agent.TLS(), PerRequestTLS: perRequest})
		if err := up.SetAdvertisement(d.Advertisement()); err != nil {
			b.Fatal(err)
		}
		defer up.CloseIdleConnections()
		var lat agenttest.Latency
		b.ResetTimer()
		for b.Loop() {
			err := lat.Time(func() error {
				env, err := up.Do(ctx, http.MethodGet, "/1.0", nil)
				if err == nil && env.StatusCode != http.StatusOK {
					b.Fatalf("GET /1.0 answered %+v", env)
				}
				return err
			})
			if err != nil {
				b.Fatalf("GET /1.0: %v", err)
			}
		}
		lat.Report(b)
	}
	b.Run("agent-socket", func(b *testing.B) { viaAgent(b) })
	b.Run("agent-socket-tls-per-request", func(b *testing.B) { viaAgent(b, "--tls-per-request") })
	b.Run("direct-tls-reuse", func(b *testing.B) { direct(b, false) })
	b.Run("direct-tls-per-request", func(b *testing.B) { direct(b, true) })
}
