package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// benchClusterN is how many stored instances BenchmarkClusterList spreads
// over the three members (GUESTLINK_BENCH_CLUSTER_N overrides it).
func benchClusterN() int {
	if n, err := strconv.Atoi(os.Getenv("GUESTLINK_BENCH_CLUSTER_N")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// benchCluster starts three members a, b, c on database url (heartbeat
// 500 ms, offline after offline).
func benchCluster(b *testing.B, url string, offline string) []*benchDaemon {
	b.Helper()
	bin := benchBinaries(b)
	var ms []*benchDaemon
	flags := func(name string) []string {
		return []string{"--database", url, "--name", name, "--cluster-address", freeAddr(b),
			"--cluster-heartbeat", "500ms", "--cluster-offline-after", offline}
	}
	a := benchStartDaemon(b, bin, benchNewStateDir(b), flags("a")...)
	ms = append(ms, a)
	for _, name := range []string{"b", "c"} {
		tok, err := a.Client.AddClusterMember(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, benchStartDaemon(b, bin, benchNewStateDir(b), append(flags(name), "--join", tok.Token)...))
	}
	return ms
}

// BenchmarkCluster measures issue 13's figures on three members of one
// PostgreSQL database: a forwarded action against the same action served
// locally, the latency of an event from the member that publishes it to a
// subscriber of another member, and how long a killed member takes to be
// seen offline.
func BenchmarkCluster(b *testing.B) {
	ctx := context.Background()
	ms := benchCluster(b, dbtest.PostgresURL(b), "3s")
	a, bm := ms[0], ms[1]
	for _, m := range []string{"a", "b"} {
		if _, err := a.Client.Create(ctx, api.InstancesPost{Name: "bench-" + m, Backend: "sim", Target: m}); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("forward", func(b *testing.B) {
		var local, forwarded benchLatency
		for range b.N {
			for _, tc := range []struct {
				name string
				lat  *benchLatency
			}{{"bench-a", &local}, {"bench-b", &forwarded}} {
				t0 := time.Now()
				if _, err := a.Client.UpdateConfig(ctx, tc.name, map[string]string{"user.n": strconv.Itoa(int(t0.UnixNano()))}, nil); err != nil {
					b.Fatal(err)
				}
				tc.lat.Add(time.Since(t0))
			}
		}
		local.Report(b, "local-", time.Microsecond)
		forwarded.Report(b, "forwarded-", time.Microsecond)
		b.ReportMetric(float64(forwarded.Percentile(50)-local.Percentile(50))/1e3, "overhead-median-µs")
	})

	b.Run("event", func(b *testing.B) {
		// A config change on b (asked of b) -> its instance-updated event
		// on a's stream; and the same change's event on b's own stream.
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		f := client.EventFilter{Types: []string{"lifecycle"}, Instances: []string{"bench-b"}}
		onA, errA := a.Client.Events(sctx, f)
		onB, errB := bm.Client.Events(sctx, f)
		var cross, same benchLatency
		for i := range b.N {
			val := fmt.Sprintf("ev-%d-%d", time.Now().UnixNano(), i) // a change each time: one instance-updated event
			t0 := time.Now()
			if _, err := bm.Client.UpdateConfig(ctx, "bench-b", map[string]string{"user.e": val}, nil); err != nil {
				b.Fatal(err)
			}
			for _, s := range []struct {
				ch   <-chan api.Event
				errs <-chan error
				lat  *benchLatency
			}{{onA, errA, &cross}, {onB, errB, &same}} {
				for got := false; !got; {
					select {
					case ev := <-s.ch:
						if strings.Contains(string(ev.Metadata), `"instance-updated"`) {
							s.lat.Add(time.Since(t0))
							got = true
						}
					case err := <-s.errs:
						b.Fatal(err)
					case <-time.After(30 * time.Second):
						b.Fatal("no event within 30s")
					}
				}
			}
		}
		cross.Report(b, "cross-member-", time.Microsecond)
		same.Report(b, "same-member-", time.Microsecond)
	})

	var detect time.Duration // measured once: the benchmark function may run again
	b.Run("offline", func(b *testing.B) {
		if detect > 0 {
			b.ReportMetric(detect.Seconds(), "detect-s")
			return
		}
		c := ms[2]
		t0 := time.Now()
		_ = c.cmd.Process.Kill()
		for {
			list, err := a.Client.ClusterMembers(ctx)
			if err != nil {
				b.Fatal(err)
			}
			off := false
			for _, m := range list {
				off = off || (m.Name == "c" && m.Status == "offline")
			}
			if off {
				break
			}
			if time.Since(t0) > time.Minute {
				b.Fatal("c not offline after a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		detect = time.Since(t0)
		b.ReportMetric(detect.Seconds(), "detect-s")
		b.ReportMetric(3, "offline-after-s")
	})
}

// BenchmarkClusterList lists 10,000 stored instances spread over three
// members, from one member: its own third from memory, the others' over
// the cluster link.
func BenchmarkClusterList(b *testing.B) {
	ctx := context.Background()
	url := dbtest.PostgresURL(b)
	n := benchClusterN()
	ms := benchCluster(b, url, "12s")
	// Rows written straight into the store, located on the three members;
	// each member loads its own on restart.
	store := dbtest.Open(b, url)
	for i := range n {
		loc := []string{"a", "b", "c"}[i%3]
		in := &db.Instance{Name: fmt.Sprintf("l%05d", i), UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Backend: "sim",
			PowerState: "stopped", Location: loc, CreatedAt: time.Now().UTC()}
		if err := store.CreateInstance(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range ms {
		if _, err := m.Restart(); err != nil {
			b.Fatal(err)
		}
	}
	a := ms[0]
	b.ResetTimer()
	var lat benchLatency
	for range b.N {
		t0 := time.Now()
		list, err := a.Client.Instances(ctx, client.InstanceFilter{})
		if err != nil {
			b.Fatal(err)
		}
		lat.Add(time.Since(t0))
		if len(list) != n {
			b.Fatalf("listed %d instances, want %d", len(list), n)
		}
	}
	lat.Report(b, "list-", time.Millisecond)
	b.ReportMetric(float64(n), "instances")
}
