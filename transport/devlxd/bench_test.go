package devlxd

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/metrics"
	"github.com/guestlink/guestlink/errdefs"
)

// BenchmarkGetInfo measures GET /1.0 answered by the daemon's handlers over
// a local socket handed in with ServeConn: TLS with certificate checks, one
// kept-alive connection per parallel client. The agent-proxied path is
// measured against this figure.
func BenchmarkGetInfo(b *testing.B) {
	e := newEnv(b, nil)
	c := e.client(uuidA, e.agents["a"])
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get("https://lxd/1.0")
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkGetInfoMetrics measures what metrics add to a guest's request:
// GET /1.0 as BenchmarkGetInfo, one client in turn (less noise than
// parallel clients on a shared machine), without an observer and with
// core/metrics' (a counter by route, method and code, a duration
// histogram by route).
func BenchmarkGetInfoMetrics(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  func() RequestObserver
	}{
		{"observer=none", func() RequestObserver { return nil }},
		{"observer=metrics", func() RequestObserver {
			return metrics.New(metrics.Config{Instances: noInstances{}, Events: noEvents{}, Plugins: noPlugins{}})
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { c.Observer = bc.obs() })
			c := e.client(uuidA, e.agents["a"])
			get := func() {
				resp, err := c.Get("https://lxd/1.0")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			get() // the TLS handshake is not the request's cost
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				get()
			}
		})
	}
}

// The services core/metrics reads at scrape time; the benchmark never scrapes.
type (
	noInstances struct{}
	noEvents    struct{}
	noPlugins   struct{}
)

func (noInstances) Get(context.Context, string) (*instance.Instance, error) {
	return nil, errdefs.ErrNotFound
}
func (noInstances) ListFunc(context.Context, instance.ListFilter, func(*instance.Instance) error) error {
	return nil
}
func (noEvents) Subscribe(events.Filter) (*events.Subscription, error) {
	return nil, errdefs.ErrNotSupported
}
func (noEvents) Stats() events.Stats        { return events.Stats{} }
func (noPlugins) Plugins() []metrics.Plugin { return nil }

// BenchmarkGetConfigKey measures GET /1.0/config/{key} for a plain user key
// and for cloud-init user-data with an SSH key merged (parsed and rendered
// as YAML on every request), the price of LXD's merge.
func BenchmarkGetConfigKey(b *testing.B) {
	for _, bc := range []struct{ name, path string }{
		{"plain", "/1.0/config/user.foo"},
		{"user-data-with-ssh-keys", "/1.0/config/cloud-init.user-data"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, nil)
			c := e.client(uuidA, e.agents["a"])
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := c.Get("https://lxd" + bc.path)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
