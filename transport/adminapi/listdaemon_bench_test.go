package adminapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/instance/record"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// lockedReports is the agents' reports of guests as core/agentmon keeps
// them: one monitor per guest in a map under one service lock, which the
// heartbeats take too, each address read from an atomic-like field. It
// answers CachedIPv4 one row at a time (as the list read it before) and,
// when batch is set, CachedIPv4s (a batch of rows per hold of the lock).
type lockedReports struct {
	mu       sync.Mutex
	monitors map[string]*reportMonitor
}

type reportMonitor struct{ ipv4 string }

func (g *lockedReports) Guest(context.Context, string, time.Duration) (*api.GuestInfo, bool) {
	return nil, false
}
func (g *lockedReports) RefreshGuest(string) *api.GuestInfo { return nil }
func (g *lockedReports) CachedIPv4(uuid string) string {
	g.mu.Lock()
	m := g.monitors[uuid]
	g.mu.Unlock()
	if m == nil {
		return ""
	}
	return m.ipv4
}

// batchReports is lockedReports with CachedIPv4s.
type batchReports struct{ *lockedReports }

func (g batchReports) CachedIPv4s(uuids, dst []string) {
	g.mu.Lock()
	for i, u := range uuids {
		dst[i] = ""
		if m := g.monitors[u]; m != nil {
			dst[i] = m.ipv4
		}
	}
	g.mu.Unlock()
}

// BenchmarkInstanceListDaemon is GET /1.0/instances at 10,000 running
// guests in the daemon's shape, in process: the real instance manager
// (SQLite store, entries loaded from it, each guest's agent connected
// and heartbeating, a quarter Ready), the agents' reports in a map under
// one lock as core/agentmon keeps them, heartbeat traffic beside the
// lists (2,000 a second: 10,000 guests every 5 s, each taking the
// reports' lock and recording its time in the manager) and a live heap of
// about 150 MB (the daemon's was 200 MB idle), so that the collector costs
// what it costs there. Each list is the GET with the body read and
// dropped: the daemon's work and the socket's (cpu-ms/list); the
// client's decode is BenchmarkDecodeRunning10k's (package client), as the
// CLI is another process with a heap of its own. Full objects and the CLI
// table's summary; "rows" with reports that read a batch of addresses at
// once (CachedIPv4s, as core/agentmon does), "per-row" with reports read
// one row at a time. The heartbeat traffic's own CPU is in every figure;
// hb-cpu-ms/list is its share, measured alone over the same wall time.
func BenchmarkInstanceListDaemon(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	store := dbtest.SQLite(b)
	bus := events.New(store)
	b.Cleanup(func() { _ = bus.Close() })
	mgr, err := instance.NewManager(instance.Config{Store: store, Backends: newMemBackends(b), Bus: bus, DefaultBackend: "mem"})
	if err != nil {
		b.Fatal(err)
	}
	started := time.Date(2026, 11, 27, 1, 28, 57, 333776222, time.UTC)
	uuids := make([]string, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				at := started.Add(time.Duration(i) * time.Millisecond)
				rec := &record.Instance{Name: fmt.Sprintf("f-%d", i), UUID: uuids[i], Backend: "mem",
					Config:     map[string]string{"volatile.last_state.ready": "false", "volatile.uuid": uuids[i]},
					PowerState: status.PowerRunning, Boot: 1, StartedAt: &at, CreatedAt: at.Add(-time.Minute)}
				if err := store.CreateInstance(ctx, rec); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		uuids[i] = fmt.Sprintf("%08x-f31d-4349-8cb2-d85ea7ac8899", i)
		work <- i
	}
	close(work)
	wg.Wait()
	reports := &lockedReports{monitors: map[string]*reportMonitor{}}
	work = make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := mgr.SetAgentState(ctx, uuids[i], instance.AgentConnected, started.Add(time.Minute)); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		reports.monitors[uuids[i]] = &reportMonitor{ipv4: fmt.Sprintf("10.0.%d.%d", i/250, i%250+2)}
		work <- i
	}
	close(work)
	wg.Wait()
	for i := 0; i < n; i += 4 {
		if err := mgr.Declare(ctx, uuids[i], instance.Declaration{State: instance.DeclaredReady}, events.Requestor{Protocol: "test"}); err != nil {
			b.Fatal(err)
		}
	}
	ballast := make([]*[64]byte, 2_000_000) // the daemon's live heap
	for i := range ballast {
		ballast[i] = new([64]byte)
	}
	defer runtime.KeepAlive(ballast)

	// Heartbeats beside the lists: every 5 s per guest.
	stop := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		i := 0
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				for range 2 {
					u := uuids[i%n]
					i++
					reports.CachedIPv4(u) // agentmon looks the monitor up under its lock
					mgr.RecordHeartbeat(u, instance.AgentConnected, now)
				}
			}
		}
	}()
	defer func() { close(stop); <-hbDone }()
	// The heartbeats' own CPU per wall second, alone.
	hbWindow := 300 * time.Millisecond
	c0, t0 := processCPU(), time.Now()
	<-time.After(hbWindow)
	hbRate := float64(processCPU()-c0) / float64(time.Since(t0))

	for _, reportsForm := range []struct {
		name   string
		guests adminapi.GuestReports
	}{{"rows", batchReports{reports}}, {"per-row", reports}} {
		backends := &apitest.Backends{}
		backends.Set(apitest.DefaultBackends()...)
		a := adminapi.New(adminapi.Config{Instances: mgr, Events: bus, Backends: backends, Guests: reportsForm.guests})
		sock := fmt.Sprintf("%s/%s.sock", b.TempDir(), reportsForm.name)
		ln, err := adminapi.ListenUnix(sock)
		if err != nil {
			b.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- a.Serve(ln) }()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		for _, form := range []struct{ name, query string }{{"full", "?recursion=1"}, {"summary", "?recursion=1&fields=" + cliFields}} {
			raw := func() int {
				resp, err := hc.Get("http://guestlink/1.0/instances" + form.query)
				if err != nil {
					b.Fatal(err)
				}
				size, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(err, resp.Status)
				}
				return int(size)
			}
			raw()        // fills the slots
			runtime.GC() // the setup's garbage is not the lists'
			b.Run(reportsForm.name+"/"+form.name, func(b *testing.B) {
				var lat []time.Duration
				var size int
				cpu0, wall0 := processCPU(), time.Now()
				for b.Loop() {
					t0 := time.Now()
					size = raw()
					lat = append(lat, time.Since(t0))
				}
				wall := time.Since(wall0)
				reportLatency(b, lat, cpu0)
				b.ReportMetric(hbRate*float64(wall.Microseconds())/1000/float64(len(lat)), "hb-cpu-ms/list")
				b.ReportMetric(float64(size)/(1<<20), "MiB")
			})
		}
		hc.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.Shutdown(sctx); err != nil {
			b.Error(err)
		}
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
	}
}
