package pluginhost

import (
	"context"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// pingResult is the verdict of one health check.
type pingResult int

const (
	pingOK        pingResult = iota // the plugin answered in time
	pingFailed                      // the plugin did not answer, and the daemon was responsive
	pingSaturated                   // no answer, but the daemon itself ran late: not the plugin's fault
)

// Saturation probe. A ping that fails is only held against the plugin when
// the daemon could have received its answer: the goroutines that read it
// (gRPC's reader, woken by the network poller) must have got a CPU in time.
// Under a flood (thousands of runnable goroutines on two cores) a runnable
// goroutine waits seconds for a CPU, the answer sits unread and the ping
// times out although the plugin replied at once. Timer wake-ups jump the
// queue, so a late timer proves nothing: the probe reads the runtime's own
// scheduling latencies over the ping and yields to the global run queue.
const (
	minLateness  = 20 * time.Millisecond // lateness always tolerated
	latenessFrac = 5                     // or HealthTimeout/latenessFrac, if larger
	lateQuantile = 0.5                   // saturated when this share of the ping's scheduling waits were late
	yieldProbes  = 3                     // Gosched round trips measured after a failed ping
)

// schedLatencies is the runtime metric of how long goroutines waited
// runnable before running.
const schedLatencies = "/sched/latencies:seconds"

// ping asks the plugin for its Info within timeout and judges a failure;
// the Info is returned with pingOK.
func ping(ctx context.Context, c *sdk.Client, timeout time.Duration) (*sdk.Info, pingResult, error) {
	before := readSchedLatencies()
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	info, err := c.Backend().Info(pctx)
	cancel()
	if err == nil {
		return info, pingOK, nil
	}
	tolerance := max(minLateness, timeout/latenessFrac)
	if overrun := time.Since(start) - timeout; overrun > tolerance {
		// The call returned well after its deadline: this goroutine did
		// not run for that long.
		return nil, pingSaturated, err
	}
	if lateShare(before, readSchedLatencies(), tolerance) >= lateQuantile || yieldLate(tolerance) {
		return nil, pingSaturated, err
	}
	return nil, pingFailed, err
}

// readSchedLatencies returns the runtime's scheduling latency histogram.
func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// lateShare returns the share of the scheduling waits between two readings
// of the histogram that were longer than tolerance (0 without data).
func lateShare(before, after *metrics.Float64Histogram, tolerance time.Duration) float64 {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0
	}
	limit := tolerance.Seconds()
	var total, late uint64
	for i := range after.Counts {
		n := after.Counts[i] - before.Counts[i]
		total += n
		if after.Buckets[i] >= limit { // the bucket's lower bound
			late += n
		}
	}
	if total == 0 {
		return 0
	}
	return float64(late) / float64(total)
}

// yieldLate reports whether a goroutine that yields its CPU (and so joins
// the global run queue, as goroutines woken by the network poller do)
// waits more than tolerance to run again.
func yieldLate(tolerance time.Duration) bool {
	for range yieldProbes {
		start := time.Now()
		runtime.Gosched()
		if time.Since(start) > tolerance {
			return true
		}
	}
	return false
}
