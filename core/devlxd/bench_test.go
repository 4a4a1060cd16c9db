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
