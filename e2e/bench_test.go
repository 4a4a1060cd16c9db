package e2e

// Daemon-level benchmarks: a real guestlinkd process (with the real sim
// plugin, real sim guests and, where the figure is about it, the real agent)
// driven through client over the admin Unix socket. They print the
// figures docs/performance.md records; `make bench` runs them.
//
// The fixtures are expensive (10,000 instances, 1,000 running guests), so
// each benchmark builds its fixture once and its sub-benchmarks measure
// against it; one b.N iteration is one sample. Run them with a fixed count,
// e.g. -benchtime 10x.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/internal/testwait"
)

// Fixture sizes; the environment variables shrink them for quick runs.
const (
	benchInstancesEnv = "GUESTLINK_BENCH_INSTANCES" // default 10,000
	benchGuestsEnv    = "GUESTLINK_BENCH_GUESTS"    // default 1,000
)

func benchSize(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", env, v)
	}
	return n
}

// benchSleepCommand is the guest command of guests that run no agent.
const benchSleepCommand = "exec sleep 3600"

// BenchmarkDaemon10k measures the daemon with 10,000 (stopped sim)
// instances: listing them all over the admin socket, its resident memory,
// durable state changes through the API, and cold start (exec until the
// admin socket answers).
func BenchmarkDaemon10k(b *testing.B) {
	benchRaiseNoFile(b)
	n := benchSize(b, benchInstancesEnv, 10000)
	bin := benchBinaries(b)
	d := benchStartDaemon(b, bin, benchNewStateDir(b))
	ctx := context.Background()
	began := time.Now()
	cfg := map[string]string{"sim.command": benchSleepCommand, "user.role": "bench", "user.tier": "web"}
	if err := benchCreate(ctx, d.Client, "i", n, 16, cfg, false); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d instances in %v", n, time.Since(began).Round(time.Millisecond))

	b.Run("list", func(b *testing.B) {
		var lat benchLatency
		for b.Loop() {
			start := time.Now()
			list, err := d.Client.Instances(ctx, client.InstanceFilter{})
			lat.Add(time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if len(list) != n {
				b.Fatalf("listed %d instances, want %d", len(list), n)
			}
		}
		lat.Report(b, "", time.Millisecond)
	})

	// The same request without decoding the answer: what the daemon takes
	// (and the socket carries), apart from the client's JSON decoding.
	b.Run("list-raw", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "unix", d.Socket)
			},
		}}
		defer hc.CloseIdleConnections()
		var lat, decode benchLatency
		var body []byte
		for b.Loop() {
			start := time.Now()
			resp, err := hc.Get("http://unix/1.0/instances")
			if err != nil {
				b.Fatal(err)
			}
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			lat.Add(time.Since(start))
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET /1.0/instances: %d, %v", resp.StatusCode, err)
			}
			// What the client does with the answer: one pass over the
			// envelope, the metadata decoded into the list on the way.
			start = time.Now()
			var list []api.Instance
			env := struct {
				Metadata any `json:"metadata"`
			}{Metadata: &list}
			if err := json.Unmarshal(body, &env); err != nil {
				b.Fatal(err)
			}
			decode.Add(time.Since(start))
			if len(list) != n {
				b.Fatalf("decoded %d instances, want %d", len(list), n)
			}
		}
		lat.Report(b, "", time.Millisecond)
		decode.Report(b, "decode-", time.Millisecond)
		b.ReportMetric(float64(len(body))/(1<<20), "body-MiB")
	})

	b.Run("rss", func(b *testing.B) {
		var rss, hwm int64
		for b.Loop() {
			var err error
			if rss, err = benchProcStatus(d.PID(), "VmRSS"); err != nil {
				b.Fatal(err)
			}
			if hwm, err = benchProcStatus(d.PID(), "VmHWM"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rss)/1024, "rss-MiB")
		b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	})

	// One iteration is a burst of config changes, 32 at a time over the
	// admin socket; each is answered only after its transaction (instance,
	// timeline entry, event) committed.
	b.Run("state-changes", func(b *testing.B) {
		const burst, conc = 1000, 32
		var total time.Duration
		round := 0
		for b.Loop() {
			round++
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(conc)
			for i := range burst {
				g.Go(func() error {
					name := fmt.Sprintf("i-%d", (round*burst+i)%n)
					_, err := d.Client.UpdateConfig(gctx, name, map[string]string{"user.round": strconv.Itoa(round)}, nil)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(burst*round)/total.Seconds(), "changes/s")
	})

	b.Run("cold-start", func(b *testing.B) {
		var lat benchLatency
		for b.Loop() {
			took, err := d.Restart()
			if err != nil {
				b.Fatal(err)
			}
			lat.Add(took)
		}
		lat.Report(b, "", time.Millisecond)
		if rss, err := benchProcStatus(d.PID(), "VmRSS"); err == nil {
			b.ReportMetric(float64(rss)/1024, "rss-after-start-MiB")
		}
	})
}

// benchWaitInstance waits until cond holds for the named instance.
func benchWaitInstance(b *testing.B, c *client.Client, name string, what string, cond func(*api.Instance) bool) *api.Instance {
	b.Helper()
	var inst *api.Instance
	var err error
	if !testwait.Until(2*time.Minute, func() bool {
		inst, err = c.Instance(context.Background(), name)
		return err == nil && cond(inst)
	}) {
		b.Fatalf("instance %q: no %s within 2 minutes (last: %+v, err %v)", name, what, inst, err)
	}
	return inst
}
