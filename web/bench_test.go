package web

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// fleet returns n instances in a realistic mix of states.
func fleet(n int) []*instance.Instance {
	out := make([]*instance.Instance, n)
	for i := range out {
		name := fmt.Sprintf("guest%05d", i)
		switch i % 10 {
		case 0:
			out[i] = stopped(name, "sim")
		case 1:
			out[i] = running(name, instance.AgentLost)
		case 2:
			out[i] = running(name, instance.AgentNone)
		default:
			out[i] = ready(name, time.Duration(i)*time.Second, time.Duration(i%7+1)*300*time.Millisecond)
		}
	}
	return out
}

// BenchmarkInstancesPage10k measures one instances page (100 rows) over a
// fleet of 10,000 instances, through the whole fiber handler: listing,
// filtering (in the fake, as the service does), sorting, paging, rendering.
func BenchmarkInstancesPage10k(b *testing.B) {
	app, _ := newTestApp(newFakeInstances(fleet(10000)...), newBusEvents(), Config{PageSize: 100})
	for _, q := range []string{"page=50", "status=Running&sort=ready&page=20", "q=guest09&agent=connected", "sort=started&page=100"} {
		b.Run(q, func(b *testing.B) {
			var size int
			for b.Loop() {
				res, err := app.Test(httptest.NewRequest(http.MethodGet, "/instances?"+q, nil), -1)
				if err != nil || res.StatusCode != http.StatusOK {
					b.Fatalf("GET /instances?%s: %v %v", q, err, res)
				}
				n, _ := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				size = int(n)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}

// BenchmarkOverview10k measures the overview page over 10,000 instances.
func BenchmarkOverview10k(b *testing.B) {
	app, _ := newTestApp(newFakeInstances(fleet(10000)...), newBusEvents(), Config{})
	for b.Loop() {
		res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET /: %v %v", err, res)
		}
		res.Body.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchmarkOverview10kWithBoots is BenchmarkOverview10k with the
// readiness section fed: 1,000 boots (FleetEvents lifecycle events) in the
// event log, read and paired on every page.
func BenchmarkOverview10kWithBoots(b *testing.B) {
	insts := fleet(10000)
	ev := newBusEvents()
	t0 := time.Now().Add(-time.Hour)
	for i := range 1000 {
		bootEvents(b, ev, insts[i].Name, t0.Add(time.Duration(i)*time.Second), 300+i%500, 800+i%2000, 0)
	}
	app, _ := newTestApp(newFakeInstances(insts...), ev, Config{})
	for b.Loop() {
		res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET /: %v %v", err, res)
		}
		res.Body.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchmarkSSEClientMemory measures the server-side memory of one open
// live stream: N raw TCP clients (no client-side buffers) open /events on a
// real server; the heap and stack growth is divided by N. It also measures
// the fan-out of one event to all N streams.
func BenchmarkSSEClientMemory(b *testing.B) {
	const clients = 200
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(fleet(100)...), ev, Config{Heartbeat: time.Minute})
	url := server(b, app, d)
	addr := strings.TrimPrefix(url, "http://")
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	readers := make([]*bufio.Reader, 0, clients)
	for range clients {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		r := bufio.NewReaderSize(c, 64<<10)
		line, err := r.ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			b.Fatalf("opening a stream: %q %v", line, err)
		}
		readers = append(readers, r)
	}
	waitStreams(b, d, clients)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	grown := (ms1.HeapInuse + ms1.StackInuse) - (ms0.HeapInuse + ms0.StackInuse)
	// Client-side readers are part of the figure: subtract their buffers.
	perClient := (float64(grown) - float64(clients*(64<<10))) / clients

	for b.Loop() {
		pub := ev.publish(b, events.InstanceAgentConnected, "guest00003", nil, nil)
		want := fmt.Sprintf("id: %d", pub.ID)
		for _, r := range readers {
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, want) {
					break
				}
			}
		}
	}
	b.ReportMetric(perClient, "bytes/client")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/fanout")
}

// BenchmarkStreamStorm measures what a storm's events cost the live streams:
// 50 raw TCP clients read /events while 500 events of a fleet of 1,000
// are published 1 ms apart (a storm of 1,000 a second, as 1,000 guests
// declaring Ready), until every client has read the last event its page
// shows; cpu-us/event is the process's CPU (server and the 50 readers) per
// event, writes/event and bytes/event the chunks the streams wrote.
// "unscoped" opens 50 streams without view= (every fragment of every
// event, as every page did before the streams were scoped); "pages"
// opens what real pages open: 40 the instances list's first page (100
// rows: 100 of the events), 10 single instance pages (one event each).
func BenchmarkStreamStorm(b *testing.B) {
	b.Run("unscoped", func(b *testing.B) {
		benchStreamStorm(b, func(string) []string {
			return slices.Repeat([]string{"/events"}, 50)
		})
	})
	b.Run("pages", func(b *testing.B) {
		benchStreamStorm(b, func(url string) []string {
			list := benchPageStream(b, url, "/instances")
			paths := slices.Repeat([]string{list}, 40)
			for i := range 10 {
				paths = append(paths, benchPageStream(b, url, fmt.Sprintf("/instances/guest%05d", 5+50*i)))
			}
			return paths
		})
	})
}

// benchPageStream returns the stream the page at path opens (sse-connect).
func benchPageStream(b *testing.B, url, path string) string {
	res, err := http.Get(url + path)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	connect := doc.Find("body").AttrOr("sse-connect", "")
	if res.StatusCode != http.StatusOK || connect == "" {
		b.Fatalf("GET %s: %d, sse-connect %q", path, res.StatusCode, connect)
	}
	return connect
}

func benchStreamStorm(b *testing.B, streams func(url string) []string) {
	const n = 500
	for b.Loop() {
		ev := newBusEvents()
		app, d := newTestApp(newFakeInstances(fleet(1000)...), ev, Config{Heartbeat: time.Minute})
		url := server(b, app, d)
		addr := strings.TrimPrefix(url, "http://")
		paths := streams(url)
		var chunks, bytes atomic.Int64
		type reader struct {
			seen, want atomic.Int64 // the newest id read, the last one the page shows
			finished   atomic.Bool
		}
		readers := make([]*reader, len(paths))
		done := make(chan error, len(paths))
		finish := func(r *reader, err error) {
			if r.finished.CompareAndSwap(false, true) {
				done <- err
			}
		}
		for i, path := range paths {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr)
			r := &reader{}
			r.want.Store(1 << 62)
			readers[i] = r
			br := bufio.NewReaderSize(c, 64<<10)
			go func() {
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						finish(r, err)
						return
					}
					if size, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64); err == nil && size > 0 {
						chunks.Add(1)
						bytes.Add(size)
						data := make([]byte, size+2)
						if _, err := io.ReadFull(br, data); err != nil {
							finish(r, err)
							return
						}
						for _, l := range strings.Split(string(data), "\n") {
							if v, ok := strings.CutPrefix(l, "id: "); ok {
								id, _ := strconv.ParseInt(v, 10, 64)
								r.seen.Store(max(r.seen.Load(), id))
							}
						}
						if r.seen.Load() >= r.want.Load() {
							finish(r, nil)
						}
					}
				}
			}()
		}
		waitStreams(b, d, int64(len(paths)))
		chunks.Store(0)
		bytes.Store(0)
		cpu0 := benchProcessCPU(b)
		pace := time.NewTicker(time.Millisecond)
		last := map[string]int64{} // each instance's last event
		var lastID int64
		for i := range n {
			name := fmt.Sprintf("guest%05d", i%1000)
			pub := ev.publish(b, events.InstanceReady, name, nil, nil)
			last[name], lastID = pub.ID, pub.ID
			<-pace.C
		}
		pace.Stop()
		for i, path := range paths {
			want := lastID
			u, err := neturl.Parse(path)
			if err != nil {
				b.Fatal(err)
			}
			switch q := u.Query(); q.Get("view") {
			case "instance":
				want = last[q.Get("name")]
			case "instances":
				want = last["guest00099"] // the first page's last row
			}
			readers[i].want.Store(want)
			if readers[i].seen.Load() >= want {
				finish(readers[i], nil)
			}
		}
		for range paths {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((benchProcessCPU(b)-cpu0).Microseconds())/n, "cpu-us/event")
		b.ReportMetric(float64(chunks.Load())/n, "writes/event")
		b.ReportMetric(float64(bytes.Load())/n, "bytes/event")
	}
}

// benchProcessCPU is the CPU time (user and system) the process used so far.
func benchProcessCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
