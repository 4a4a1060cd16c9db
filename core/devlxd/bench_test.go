package devlxd

import (
	"io"
	"net/http"
	"testing"
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
