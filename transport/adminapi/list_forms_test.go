package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/transport/adminapi"
)

// allListFields are every top-level key of the instance object a list
// carries (the timeline is on GET /1.0/instances/{name} only).
const allListFields = "name,uuid,backend,status,status_code,config,devices,boot,created_at,started_at,ready_at,link,agent,devlxd_socket,details,conditions,location,status_reason,profiles,ipv4"

// unixGet returns a function that GETs a path of the admin API on sock and
// returns the status and body.
func unixGet(t *testing.T, sock string) func(path string) (int, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	return func(path string) (int, []byte) {
		t.Helper()
		resp, err := hc.Get("http://guestlink" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
}

// metadata returns the metadata of a sync envelope.
func metadata(t *testing.T, body []byte) json.RawMessage {
	t.Helper()
	var env struct {
		Type     string          `json:"type"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Type != "sync" {
		t.Fatalf("not a sync envelope (%v): %.200s", err, body)
	}
	return env.Metadata
}

// TestInstanceListForms lists the same views in each form: LXD's URL list
// without recursion and with recursion=0, the full objects with
// recursion=1 and 2, and summaries with ?fields= whose keys are exactly the
// ones asked, each the full object's bytes (all fields asked: the full
// object itself); encoded as listed, and from the views' cache slots.
func TestInstanceListForms(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) { testInstanceListForms(t, cached) })
	}
}

func testInstanceListForms(t *testing.T, cached bool) {
	views := oddFleetViews(25)
	sock := serveViewsCached(t, views, cached)
	get := unixGet(t, sock)

	code, full := get("/1.0/instances?recursion=1")
	if code != http.StatusOK {
		t.Fatalf("recursion=1: %d %s", code, full)
	}
	var fullObjs []map[string]json.RawMessage
	if err := json.Unmarshal(metadata(t, full), &fullObjs); err != nil || len(fullObjs) != len(views) {
		t.Fatalf("recursion=1: %v, %d objects", err, len(fullObjs))
	}

	for _, q := range []string{"", "?recursion=0"} {
		code, body := get("/1.0/instances" + q)
		if code != http.StatusOK {
			t.Fatalf("%q: %d %s", q, code, body)
		}
		var urls []string
		if err := json.Unmarshal(metadata(t, body), &urls); err != nil {
			t.Fatalf("%q: not a list of URLs: %v", q, err)
		}
		if len(urls) != len(views) {
			t.Fatalf("%q: %d URLs for %d instances", q, len(urls), len(views))
		}
		for i, u := range urls {
			if want := "/1.0/instances/" + views[i].Name; u != want {
				t.Fatalf("%q: URL %d = %q, want %q", q, i, u, want)
			}
		}
		// encoding/json's bytes, as the full form.
		want, _ := json.Marshal(api.Sync(urls))
		if !bytes.Equal(body, want) {
			t.Fatalf("%q: answer differs from encoding/json:\n%s\n%s", q, body, want)
		}
	}

	if code, body := get("/1.0/instances?recursion=2"); code != http.StatusOK || !bytes.Equal(body, full) {
		t.Fatalf("recursion=2 differs from recursion=1 (%d)", code)
	}
	if code, body := get("/1.0/instances?recursion=1&fields=" + allListFields); code != http.StatusOK || !bytes.Equal(body, full) {
		t.Fatalf("every field asked: differs from the full objects (%d):\n%.300s\n%.300s", code, body, full)
	}

	for _, fields := range []string{"name", "name,status", "status,name", "agent,started_at,ready_at,link,boot", "status_reason,details,name", " name , location "} {
		t.Run(fields, func(t *testing.T) {
			code, body := get("/1.0/instances?recursion=1&fields=" + strings.ReplaceAll(fields, " ", "%20"))
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			var objs []map[string]json.RawMessage
			if err := json.Unmarshal(metadata(t, body), &objs); err != nil || len(objs) != len(views) {
				t.Fatalf("%v, %d objects", err, len(objs))
			}
			for i, o := range objs {
				for k, v := range o {
					if !strings.Contains(","+strings.ReplaceAll(fields, " ", "")+",", ","+k+",") {
						t.Fatalf("object %d has %q, not asked", i, k)
					}
					if !bytes.Equal(v, fullObjs[i][k]) {
						t.Fatalf("object %d: %s = %s, the full object has %s", i, k, v, fullObjs[i][k])
					}
				}
				for _, k := range strings.Split(strings.ReplaceAll(fields, " ", ""), ",") {
					if _, inFull := fullObjs[i][k]; inFull != (o[k] != nil) {
						t.Fatalf("object %d: %q present %v, in the full object %v", i, k, o[k] != nil, inFull)
					}
				}
			}
		})
	}
}

// oddFleetViews returns fleet views, some of whose
// strings need escaping in JSON (a location, a status reason and details
// with quotes, <>&, control characters, U+2028 and invalid UTF-8).
func oddFleetViews(n int) []*instance.Instance {
	views := adminapi.FleetViews(n)
	odd := []string{"a\"b\\c", "<&>", "tab\there\nline\x01", "sep\u2028\u2029", "bad\xffutf8", "é—ü"}
	for i, v := range views {
		if i%3 == 0 {
			v.Location = odd[i%len(odd)]
			v.StatusReason = odd[(i+1)%len(odd)]
			v.Details = map[string]string{"k": odd[(i+2)%len(odd)]}
		}
		if i%5 == 0 {
			v.DevlxdSocket, v.Details, v.StartedAt, v.Agent.LastHeartbeat = "", nil, nil, nil
		}
	}
	return views
}

// TestInstanceListFormErrors sends list forms the API refuses: each is a
// 400 that names what is wrong.
func TestInstanceListFormErrors(t *testing.T) {
	get := unixGet(t, serveViews(t, adminapi.FleetViews(3)))
	for _, tt := range []struct{ query, want string }{
		{"?recursion=3", `invalid recursion "3": must be 0, 1 or 2`},
		{"?recursion=yes", `invalid recursion "yes"`},
		{"?fields=name", "fields needs recursion=1"},
		{"?recursion=0&fields=name", "fields needs recursion=1"},
		{"?recursion=1&fields=name,cpu", `invalid field "cpu": must be one of name, uuid`},
		{"?recursion=1&fields=timeline", `invalid field "timeline"`},
		{"?recursion=1&fields=", "fields is empty"},
		{"?recursion=1&fields=,,", "fields is empty"},
	} {
		t.Run(tt.query, func(t *testing.T) {
			code, body := get("/1.0/instances" + tt.query)
			var env api.Response[json.RawMessage]
			_ = json.Unmarshal(body, &env)
			if code != http.StatusBadRequest || !strings.Contains(env.Error, tt.want) {
				t.Fatalf("%d %s, want 400 with %q", code, body, tt.want)
			}
		})
	}
}

// TestClientListForms checks the client's three list calls against the
// API: names from the URL list, summaries with only the fields asked, the
// full objects.
func TestClientListForms(t *testing.T) {
	views := adminapi.FleetViews(7)
	sock := serveViews(t, views)
	c, err := client.New(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	names, err := c.InstanceNames(ctx, client.InstanceFilter{})
	if err != nil || len(names) != len(views) || names[3] != views[3].Name {
		t.Fatalf("InstanceNames = %v, %v", names, err)
	}
	sums, err := c.InstanceSummaries(ctx, client.InstanceFilter{}, "name", "status")
	if err != nil || len(sums) != len(views) {
		t.Fatalf("InstanceSummaries: %v, %d", err, len(sums))
	}
	if s := sums[0]; s.Name != views[0].Name || s.Status != views[0].Status || s.UUID != "" || s.Config != nil || s.Agent.State != "" {
		t.Fatalf("summary has more or less than name and status: %+v", s)
	}
	if _, err := c.InstanceSummaries(ctx, client.InstanceFilter{}); err == nil {
		t.Fatal("InstanceSummaries without fields: no error")
	}
	if _, err := c.InstanceSummaries(ctx, client.InstanceFilter{}, "nope"); err == nil || !strings.Contains(err.Error(), `invalid field "nope"`) {
		t.Fatalf("unknown field: %v", err)
	}
	full, err := c.Instances(ctx, client.InstanceFilter{})
	if err != nil || len(full) != len(views) || full[2].UUID != views[2].UUID || full[2].Config == nil {
		t.Fatalf("Instances: %v, %+v", err, full)
	}
}

// benchmarkInstanceList is GET /1.0/instances in one form (query) at
// 10,000 running fleet guests, body read, not decoded, each view's encoding
// kept in its cache slot as the manager keeps them. It reports the form's
// first list after the server started (cold-cpu-ms: every slot empty, as
// after every instance changed), then, with the URL list and the full form
// measured in the same run (20 lists each), the form's CPU per list ÷ the
// URL list's (url-floor-x: the URL list only walks the names, the floor of
// a list) and ÷ the full form's (full-ratio).
func benchmarkInstanceList(b *testing.B, query string) {
	const n = 10000
	sock := serveViews(b, adminapi.FleetViews(n))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	list := func(q string) int64 {
		resp, err := hc.Get("http://guestlink/1.0/instances" + q)
		if err != nil {
			b.Fatal(err)
		}
		size, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatal(err, resp.Status)
		}
		return size
	}
	cpuOf := func(q string, runs int) time.Duration {
		cpu0 := processCPU()
		for range runs {
			list(q)
		}
		return (processCPU() - cpu0) / time.Duration(runs)
	}
	coldCPU := cpuOf(query, 1)
	const floorRuns = 20
	urlCPU := cpuOf("", floorRuns)
	fullCPU := cpuOf("?recursion=1", floorRuns)
	var lat []time.Duration
	var size int64
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		t0 := time.Now()
		size = list(query)
		lat = append(lat, time.Since(t0))
	}
	cpu := (processCPU() - cpu0) / time.Duration(len(lat))
	reportLatency(b, lat, cpu0)
	b.ReportMetric(float64(size)/(1<<20), "MiB")
	b.ReportMetric(float64(coldCPU.Microseconds())/1000, "cold-cpu-ms")
	if urlCPU > 0 {
		b.ReportMetric(float64(cpu)/float64(urlCPU), "url-floor-x")
	}
	if fullCPU > 0 {
		b.ReportMetric(float64(cpu)/float64(fullCPU), "full-ratio")
	}
}

// BenchmarkInstanceListURLs is LXD's URL list (no recursion) of 10,000.
func BenchmarkInstanceListURLs(b *testing.B) { benchmarkInstanceList(b, "") }

// BenchmarkInstanceListSummary is the CLI table's summary of 10,000.
func BenchmarkInstanceListSummary(b *testing.B) {
	benchmarkInstanceList(b, "?recursion=1&fields=name,status,backend,agent,link,boot,started_at,location")
}

// BenchmarkInstanceListFull is the full objects of 10,000 (full-ratio 1).
func BenchmarkInstanceListFull(b *testing.B) { benchmarkInstanceList(b, "?recursion=1") }

// TestInstanceListRemoteIPv4: an instance of another cluster member
// carries the guest address its member sent (GuestIPv4, from that
// member's agent cache), which this member's agent cache cannot know; the
// list shows it in the full objects and the summaries (?fields=), encoded
// as listed and from the cache slots. Before, the ipv4 key was missing for
// every remote instance (guestlink list showed an empty IPV4 column).
func TestInstanceListRemoteIPv4(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			views := adminapi.FleetViews(3)
			views[1].Location, views[1].GuestIPv4 = "m2", "10.1.2.3"
			get := unixGet(t, serveViewsCached(t, views, cached))
			for _, q := range []string{"", "&fields=name,ipv4", "&fields=ipv4", "&fields=" + allListFields} {
				code, body := get("/1.0/instances?recursion=1" + q)
				if code != http.StatusOK {
					t.Fatalf("%q: %d %s", q, code, body)
				}
				var objs []struct {
					IPv4 *string `json:"ipv4"`
				}
				if err := json.Unmarshal(metadata(t, body), &objs); err != nil || len(objs) != len(views) {
					t.Fatalf("%q: %v, %d objects", q, err, len(objs))
				}
				for i, o := range objs {
					switch {
					case i == 1 && (o.IPv4 == nil || *o.IPv4 != "10.1.2.3"):
						t.Errorf("%q: the remote instance's ipv4 = %v, want 10.1.2.3: %s", q, o.IPv4, body)
					case i != 1 && o.IPv4 != nil:
						t.Errorf("%q: instance %d without an address has ipv4 %q", q, i, *o.IPv4)
					}
				}
			}
		})
	}
}

// countingGuests is the agents' reports of guests (GuestReports) with a
// fixed address per UUID, counting the calls that may reach an agent
// (Guest, RefreshGuest) apart from the cache reads (CachedIPv4).
type countingGuests struct {
	ipv4                   map[string]string
	mu                     sync.Mutex
	cached, refresh, fetch int
}

func (g *countingGuests) Guest(context.Context, string, time.Duration) (*api.GuestInfo, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fetch++
	return nil, false
}

func (g *countingGuests) RefreshGuest(string) *api.GuestInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refresh++
	return nil
}

func (g *countingGuests) CachedIPv4(uuid string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cached++
	return g.ipv4[uuid]
}

// batchGuests is countingGuests that also reads a batch of addresses at
// once (CachedIPv4s, as core/agentmon.Service does), counting the batches
// and their rows.
type batchGuests struct {
	*countingGuests
	batches, rows, tooLong int
}

func (g *batchGuests) CachedIPv4s(uuids, dst []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batches++
	g.rows += len(uuids)
	if len(uuids) > instance.ListBatch {
		g.tooLong++
	}
	for i, u := range uuids {
		dst[i] = g.ipv4[u]
	}
}

// TestInstanceListReadsCachedReports: every list form takes each guest's
// ipv4 from the agents' cache and asks for no report that may call an
// agent (RefreshGuest, Guest), with the views encoded as listed and from
// their cache slots; an instance of another member shows the address its
// member sent. Where the reports read a batch at once (batchGuests), the
// list from the cache slots reads each batch of rows (at most
// instance.ListBatch) in one call and no address one by one. Before, the
// list's ipv4 came through CachedGuest, which started a refresh per stale
// report, and later through one CachedIPv4 per row, each taking the agent
// service's lock.
func TestInstanceListReadsCachedReports(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch=%v/cached=%v", batch, cached), func(t *testing.T) {
				views := adminapi.FleetViews(4)
				if batch {
					views = adminapi.FleetViews(2*instance.ListBatch + 7) // three batches
				}
				views[3].GuestIPv4 = "10.9.9.9" // another member's, with an address of the local cache too
				counting := &countingGuests{ipv4: map[string]string{views[0].UUID: "10.0.0.10", views[2].UUID: "10.0.0.12",
					views[3].UUID: "10.0.0.13", views[len(views)-1].UUID: "10.0.0.99"}}
				var guests adminapi.GuestReports = counting
				bg := &batchGuests{countingGuests: counting}
				if batch {
					guests = bg
				}
				want := func(i int) string {
					if views[i].GuestIPv4 != "" {
						return views[i].GuestIPv4
					}
					return counting.ipv4[views[i].UUID]
				}
				get := unixGet(t, serveViewsGuests(t, views, cached, guests))
				lists := 0
				for _, q := range []string{"?recursion=1", "?recursion=1&fields=name,ipv4", "?recursion=1&fields=ipv4", "?recursion=1&fields=name", ""} {
					for range 2 { // the second list from the slots the first filled
						code, body := get("/1.0/instances" + q)
						if code != http.StatusOK {
							t.Fatalf("%q: %d %s", q, code, body)
						}
						if q == "" || strings.Contains(q, "fields=name") && !strings.Contains(q, "ipv4") {
							continue
						}
						lists++
						var objs []struct {
							IPv4 *string `json:"ipv4"`
						}
						if err := json.Unmarshal(metadata(t, body), &objs); err != nil || len(objs) != len(views) {
							t.Fatalf("%q: %v, %d objects", q, err, len(objs))
						}
						for i, o := range objs {
							got := ""
							if o.IPv4 != nil {
								got = *o.IPv4
							}
							if got != want(i) {
								t.Errorf("%q: instance %d ipv4 %q, want %q", q, i, got, want(i))
							}
						}
					}
				}
				counting.mu.Lock()
				defer counting.mu.Unlock()
				if counting.refresh != 0 || counting.fetch != 0 {
					t.Errorf("lists asked %d RefreshGuest and %d Guest, want none (cache reads: %d)", counting.refresh, counting.fetch, counting.cached)
				}
				switch {
				case batch && cached:
					wantBatches := lists * ((len(views) + instance.ListBatch - 1) / instance.ListBatch)
					if counting.cached != 0 || bg.batches != wantBatches || bg.rows != lists*len(views) || bg.tooLong != 0 {
						t.Errorf("%d lists read %d addresses one by one and %d batches of %d rows in all (%d too long), want 0 and %d of %d",
							lists, counting.cached, bg.batches, bg.rows, bg.tooLong, wantBatches, lists*len(views))
					}
				case counting.cached == 0:
					t.Error("no list read the cached addresses")
				}
			})
		}
	}
}
