package agentmon

import (
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testwait"
)

// BenchmarkClose10k measures Close of the monitors of 10,000 guests, each
// with a ring read and an agent dial in flight (a storm's moment: the
// plugin and the agents slow to answer), what the daemon's stop pays in
// its "agent_monitors" step: close-ms and close-cpu-ms (the process's).
func BenchmarkClose10k(b *testing.B) {
	const guests = 10000
	certs := testCerts(b)
	for b.Loop() {
		b.StopTimer()
		svc, g, links := newStuckService(b, certs, guests)
		testwait.For(b, "every monitor in its read and its dial", time.Minute, func() bool {
			return g.reading.Load() == guests && links.dialing.Load() == guests
		})
		cpu0 := processCPU(b)
		t0 := time.Now()
		b.StartTimer()
		if err := svc.Close(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "close-ms")
		b.ReportMetric(float64((processCPU(b) - cpu0).Milliseconds()), "close-cpu-ms")
		b.StartTimer()
	}
}
