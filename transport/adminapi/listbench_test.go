package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/transport/adminapi"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// fixedViews is an instance service whose ListFunc hands out fixed views,
// as the manager hands out its shared ones; the rest is apitest's.
type fixedViews struct {
	*apitest.Instances
	views []*instance.Instance
}

// cachedViews is fixedViews with a cache slot per view, as the manager
// keeps them (ListCachedFunc): the views never change, so their version
// stays 0.
type cachedViews struct {
	fixedViews
	caches []instance.ViewCache
}

// ListCachedFunc calls fn with the rows of every view, its version and its
// slot, in batches as the manager does.
func (s *cachedViews) ListCachedFunc(_ context.Context, _ instance.ListFilter, fn func([]instance.CachedRow) error) error {
	rows := make([]instance.CachedRow, 0, instance.ListBatch)
	for i, v := range s.views {
		rows = append(rows, instance.RowOf(v, 0, &s.caches[i]))
		if len(rows) == cap(rows) || i == len(s.views)-1 {
			if err := fn(rows); err != nil {
				return err
			}
			rows = rows[:0]
		}
	}
	return nil
}

// ListFunc calls fn with every view, ignoring the filter.
func (s *fixedViews) ListFunc(_ context.Context, _ instance.ListFilter, fn func(*instance.Instance) error) error {
	for _, v := range s.views {
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

// serveViews serves an admin API listing views on a Unix socket, each
// view's encoding kept in a cache slot (cachedViews) as the manager's are;
// it stops when tb ends.
func serveViews(tb testing.TB, views []*instance.Instance) string {
	return serveViewsCached(tb, views, true)
}

// serveViewsCached is serveViews, with the views' cache slots (cachedViews)
// or without (fixedViews: each list encodes every view).
func serveViewsCached(tb testing.TB, views []*instance.Instance, cached bool) string {
	tb.Helper()
	return serveViewsGuests(tb, views, cached, nil)
}

// serveViewsGuests is serveViewsCached with the agents' reports of guests
// (nil: none).
func serveViewsGuests(tb testing.TB, views []*instance.Instance, cached bool, guests adminapi.GuestReports) string {
	tb.Helper()
	bus := events.New(&apitest.MemEventStore{})
	backends := &apitest.Backends{}
	backends.Set(apitest.DefaultBackends()...)
	dir := tb.TempDir()
	fixed := fixedViews{Instances: apitest.NewInstances(bus, dir), views: views}
	var svc adminapi.Instances = &fixed
	if cached {
		svc = &cachedViews{fixedViews: fixed, caches: make([]instance.ViewCache, len(views))}
	}
	a := adminapi.New(adminapi.Config{Instances: svc, Events: bus, Backends: backends, Guests: guests})
	sock := filepath.Join(dir, "guestlink.sock")
	ln, err := adminapi.ListenUnix(sock)
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
		if err := <-served; err != nil {
			tb.Error(err)
		}
		_ = bus.Close()
	})
	return sock
}

// TestListAnswerMatchesEncodingJSON checks the answer of GET
// /1.0/instances as sent from the list encoder's chunks over the socket:
// encoding/json's output of the same views, byte for byte, for lists within
// one chunk and across many; encoded as listed (no cache slots), and from
// the views' cache slots (the first list fills them, the second copies
// them), with escapes and omitted keys (oddFleetViews).
func TestListAnswerMatchesEncodingJSON(t *testing.T) {
	for _, cached := range []bool{false, true} {
		for _, n := range []int{0, 1, 10, 2500} {
			t.Run(fmt.Sprintf("cached=%v/%d", cached, n), func(t *testing.T) {
				views := oddFleetViews(n)
				sock := serveViewsCached(t, views, cached)
				hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "unix", sock)
				}}}
				defer hc.CloseIdleConnections()
				list := make([]api.Instance, 0, n)
				for _, v := range views {
					list = append(list, instance.WireInstance(v, nil))
				}
				want, err := json.Marshal(api.Sync(list))
				if err != nil {
					t.Fatal(err)
				}
				for try := range 2 {
					resp, err := hc.Get("http://guestlink/1.0/instances?recursion=1")
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("list %d: answer differs from encoding/json (%d, %d bytes)", try, len(got), len(want))
					}
					if resp.ContentLength != int64(len(want)) || resp.Header.Get("Content-Type") != "application/json" {
						t.Fatalf("Content-Length %d, Content-Type %q", resp.ContentLength, resp.Header.Get("Content-Type"))
					}
				}
			})
		}
	}
}

// BenchmarkListRunning10k is GET /1.0/instances with 10,000 running fleet
// guests (adminapi.FleetViews) through the real API server and the admin Unix
// socket, without the instance manager (BenchmarkList10k in core/instance
// measures it): "client" is d.Client.Instances as make bench-fleet measures
// it (decoded), "raw" the same GET with the body only read (the daemon's
// share and the socket). It reports the median and p90 of the calls.
func BenchmarkListRunning10k(b *testing.B) {
	const n = 10000
	sock := serveViews(b, adminapi.FleetViews(n))
	ctx := context.Background()
	b.Run("client", func(b *testing.B) {
		c, err := client.New(sock)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var lat []time.Duration
		cpu0 := processCPU()
		for b.Loop() {
			t0 := time.Now()
			list, err := c.Instances(ctx, client.InstanceFilter{})
			if err != nil || len(list) != n {
				b.Fatal(err, len(list))
			}
			lat = append(lat, time.Since(t0))
		}
		reportLatency(b, lat, cpu0)
	})
	b.Run("raw", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		defer hc.CloseIdleConnections()
		var lat []time.Duration
		var size int64
		cpu0 := processCPU()
		for b.Loop() {
			t0 := time.Now()
			resp, err := hc.Get("http://guestlink/1.0/instances?recursion=1")
			if err != nil {
				b.Fatal(err)
			}
			size, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatal(err, resp.Status)
			}
			lat = append(lat, time.Since(t0))
		}
		reportLatency(b, lat, cpu0)
		b.ReportMetric(float64(size)/(1<<20), "MiB")
	})
}

// reportLatency reports the median and p90 of lat in milliseconds, and the
// CPU time of the process (server and client) per call since cpu0: on a
// shared machine it says more than the wall time.
func reportLatency(b *testing.B, lat []time.Duration, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(len(lat)), "cpu-ms/list")
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "median-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), "p90-ms")
}

// processCPU returns the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestListAnswersConcurrent: lists sent at once over several connections,
// each from chunks that the lists before gave back to their pools, are
// each encoding/json's answer, byte for byte: a chunk goes back to its
// pool only once its answer was sent.
func TestListAnswersConcurrent(t *testing.T) {
	views := oddFleetViews(2500) // about 2 MiB: every chunk size
	sock := serveViews(t, views)
	list := make([]api.Instance, 0, len(views))
	for _, v := range views {
		list = append(list, instance.WireInstance(v, nil))
	}
	want, err := json.Marshal(api.Sync(list))
	if err != nil {
		t.Fatal(err)
	}
	const clients, lists = 4, 3
	errs := make(chan error, clients)
	for range clients {
		go func() {
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}}}
			defer hc.CloseIdleConnections()
			for i := range lists {
				resp, err := hc.Get("http://guestlink/1.0/instances?recursion=1")
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("list %d: answer differs from encoding/json (%d, %d bytes)", i, len(got), len(want))
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
