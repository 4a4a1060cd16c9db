package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gofiber/fiber/v2"
	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/testwait"
)

// sseMessage is one parsed server-sent event.
type sseMessage struct {
	Event, ID, Data string
}

// sseClient reads a live stream from a real server.
type sseClient struct {
	res    *http.Response
	cancel context.CancelFunc
	msgs   chan sseMessage
}

// server runs app on a loopback listener until the test ends.
func server(t testing.TB, app *fiber.App, d *Dashboard) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		d.Close()
		if err := app.ShutdownWithTimeout(10 * time.Second); err != nil {
			t.Errorf("shutting the server down: %v", err)
		}
		<-done
	})
	return "http://" + ln.Addr().String()
}

func openStream(t testing.TB, url string, header map[string]string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		cancel()
		t.Fatalf("GET %s: %d %q", url, res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sseClient{res: res, cancel: func() { cancel(); res.Body.Close(); tr.CloseIdleConnections() }, msgs: make(chan sseMessage, 1024)}
	go func() {
		defer close(c.msgs)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m sseMessage
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.Event != "" || len(data) > 0 {
					m.Data = strings.Join(data, "\n")
					c.msgs <- m
				}
				m, data = sseMessage{}, nil
			case strings.HasPrefix(line, "event: "):
				m.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				m.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case strings.HasPrefix(line, "retry: "):
			default:
				data = append(data, "MALFORMED "+line)
			}
		}
	}()
	t.Cleanup(c.cancel)
	return c
}

// next returns the next message named one of names, skipping others.
func (c *sseClient) next(t testing.TB, names ...string) sseMessage {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				t.Fatalf("stream ended while waiting for %v", names)
			}
			for _, n := range names {
				if m.Event == n {
					return m
				}
			}
		case <-deadline:
			t.Fatalf("no %v message within 20s", names)
		}
	}
}

func TestStreamUpdates(t *testing.T) {
	noLeaks(t)
	inst := newFakeInstances(running("web1", instance.AgentConnected))
	ev := newBusEvents()
	app, d := newTestApp(inst, ev, Config{Heartbeat: 100 * time.Millisecond})
	url := server(t, app, d)

	c := openStream(t, url+"/events", nil)
	waitStreams(t, d, 1)
	inst.put(ready("web1", time.Minute, 1200*time.Millisecond))
	pub := ev.publish(t, events.InstanceReady, "web1", map[string]any{"boot": 2}, &events.Requestor{Protocol: "devlxd"})

	m := c.next(t, "update")
	if m.ID != strconv.FormatInt(pub.ID, 10) {
		t.Errorf("update id %q, want %d", m.ID, pub.ID)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader("<table><tbody>" + m.Data + "</tbody></table>"))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name, sel, attr, want string
	}{
		{"row", `tr#row-web1`, "hx-swap-oob", "true"},
		{"row status", `tr#row-web1 #status-web1`, "data-value", "Ready"},
		{"row agent", `tr#row-web1 #agent-web1`, "data-value", "connected"},
		{"row time to ready", `tr#row-web1 [data-testid="time-to-ready"]`, "", "1.2s"},
		{"page badges", `#badges-web1`, "hx-swap-oob", "true"},
		{"page status", `#badges-web1 #istatus-web1`, "data-value", "Ready"},
		{"page time to ready", `#badges-web1 [data-testid="badge-time-to-ready"]`, "", "ready in 1.2s"},
		{"timeline", `ol:has([data-testid="timeline-entry"])`, "hx-swap-oob", "afterbegin:#timeline-web1"},
		{"timeline kind", `[data-testid="timeline-entry"]`, "data-kind", "ready"},
		{"timeline boot", `[data-testid="timeline-entry"]`, "data-boot", "2"},
		{"timeline cause", `[data-testid="timeline-entry"]`, "data-cause", "devlxd"},
		{"activity", `ol:has([data-testid="activity-item"])`, "hx-swap-oob", "afterbegin:#activity-list"},
		{"activity id", `[data-testid="activity-item"]`, "data-event-id", strconv.FormatInt(pub.ID, 10)},
	}
	for _, ck := range checks {
		s := doc.Find(ck.sel)
		got := strings.TrimSpace(s.Text())
		if ck.attr != "" {
			got = s.AttrOr(ck.attr, "<none>")
		}
		if s.Length() != 1 || got != ck.want {
			t.Errorf("%s: %d match(es) of %s, value %q, want %q", ck.name, s.Length(), ck.sel, got, ck.want)
		}
	}
	if strings.Contains(m.Data, "MALFORMED") {
		t.Errorf("malformed SSE lines: %s", m.Data)
	}
	// Counts follow a burst of updates; heartbeats keep coming.
	cm := c.next(t, "counts")
	if !strings.Contains(cm.Data, `id="status-counts"`) || !strings.Contains(cm.Data, `hx-swap-oob="true"`) {
		t.Errorf("counts message %q lacks the out-of-band tiles", cm.Data)
	}
	for range 2 {
		hb := c.next(t, "heartbeat")
		if _, err := time.Parse(time.RFC3339, hb.Data); err != nil || hb.ID != "" {
			t.Errorf("heartbeat %+v: want a timestamp and no id", hb)
		}
	}
	// Deleted and created instances patch the table too.
	inst.put(stopped("web9", "sim"))
	ev.publish(t, events.InstanceCreated, "web9", nil, nil)
	if m := c.next(t, "update"); !strings.Contains(m.Data, `hx-swap-oob="beforeend:#instance-rows"`) || !strings.Contains(m.Data, `id="row-web9"`) {
		t.Errorf("created: %q, want a row appended", m.Data)
	}
	ev.publish(t, events.InstanceDeleted, "web9", nil, nil)
	if m := c.next(t, "update"); !strings.Contains(m.Data, `id="row-web9" hx-swap-oob="delete"`) {
		t.Errorf("deleted: %q, want the row removed", m.Data)
	}
	c.cancel()
	waitStreams(t, d, 0)
}

// TestStreamAccessTimeline: an exec and the file operations, published as
// the instance service records them, reach the instance page's timeline
// live (before, only a reload showed them): the entry's kind, outcome,
// boot, cause and detail are the stored entry's. Tried: an exec with its
// exit code, a push, a refused pull and a failed delete.
func TestStreamAccessTimeline(t *testing.T) {
	noLeaks(t)
	inst := newFakeInstances(running("web1", instance.AgentConnected))
	ev := newBusEvents()
	app, d := newTestApp(inst, ev, Config{Heartbeat: 100 * time.Millisecond})
	url := server(t, app, d)
	c := openStream(t, url+"/events", nil)
	waitStreams(t, d, 1)
	root := &events.Requestor{Protocol: "unix", Username: "root", UID: "0"}
	for _, tt := range []struct {
		action           string
		ctx              map[string]any
		kind, to, detail string
	}{
		{events.InstanceExec, map[string]any{"boot": 3, "command": []string{"sh", "-c", "exit 7"}, "exit_code": 7}, "exec", "exit 7", `sh -c "exit 7" (by unix root (uid 0))`},
		{events.InstanceFilePushed, map[string]any{"boot": 3, "path": "/etc/motd", "status": 200}, "file", "pushed", "/etc/motd (by unix root (uid 0))"},
		{events.InstanceFileRetrieved, map[string]any{"boot": 3, "path": "/nope", "status": 404}, "file", "refused 404", "/nope (by unix root (uid 0))"},
		{events.InstanceFileDeleted, map[string]any{"boot": 3, "path": "/tmp/x", "status": 0, "error": "agent unreachable"}, "file", "failed", "/tmp/x (by unix root (uid 0)): agent unreachable"},
	} {
		t.Run(tt.action, func(t *testing.T) {
			ev.publish(t, tt.action, "web1", tt.ctx, root)
			m := c.next(t, "update")
			doc, err := goquery.NewDocumentFromReader(strings.NewReader(m.Data))
			if err != nil {
				t.Fatal(err)
			}
			e := doc.Find(`ol[hx-swap-oob="afterbegin:#timeline-web1"] [data-testid="timeline-entry"]`)
			if e.Length() != 1 {
				t.Fatalf("no live timeline entry in %q", m.Data)
			}
			got := []string{e.AttrOr("data-kind", ""), e.AttrOr("data-to", ""), e.AttrOr("data-boot", ""), e.AttrOr("data-cause", "")}
			want := []string{tt.kind, tt.to, "3", "api: unix root (uid 0)"}
			if !slices.Equal(got, want) || !strings.Contains(e.Text(), "("+tt.detail+")") {
				t.Errorf("entry %q with text %q, want %q and detail %q", got, e.Text(), want, tt.detail)
			}
		})
	}
	c.cancel()
	waitStreams(t, d, 0)
}

// noLeaks checks, after every other cleanup of the test (the server's
// shutdown included), that the test left no goroutine behind. Ignored:
// process-wide clocks fiber and fasthttp start once and fasthttp's
// idle-worker cleaner, which notices a stopped server only after its 10s
// sleep. (The dashboard keeps no CSRF store, so no collector either.)
func noLeaks(t *testing.T) {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func waitStreams(t testing.TB, d *Dashboard, n int64) {
	t.Helper()
	if !testwait.Until(20*time.Second, func() bool { return d.OpenStreams() == n }) {
		t.Fatalf("%d open streams after 20s, want %d", d.OpenStreams(), n)
	}
}

func TestStreamResume(t *testing.T) {
	noLeaks(t)
	tests := []struct {
		name   string
		query  string
		header string
		first  int64
	}{
		{"since", "?since=2", "", 3},
		{"Last-Event-ID", "", "4", 5},
		{"header larger", "?since=1", "5", 6},
		{"query larger", "?since=4", "2", 5},
		{"up to date", "?since=6", "", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := newFakeInstances(running("web1", instance.AgentConnected))
			ev := newBusEvents()
			app, d := newTestApp(inst, ev, Config{Heartbeat: 100 * time.Millisecond})
			url := server(t, app, d)
			for range 6 {
				ev.publish(t, events.InstanceAgentConnected, "web1", nil, nil)
			}
			h := map[string]string{}
			if tt.header != "" {
				h["Last-Event-ID"] = tt.header
			}
			c := openStream(t, url+"/events"+tt.query, h)
			for want := tt.first; want <= 6; want++ {
				if m := c.next(t, "update"); m.ID != strconv.FormatInt(want, 10) {
					t.Fatalf("update id %s, want %d (no gap, no duplicate)", m.ID, want)
				}
			}
			if tt.first <= 6 {
				// A page that resumed gets fresh counts too.
				if m := c.next(t, "counts"); !strings.Contains(m.Data, `id="agent-counts"`) {
					t.Errorf("counts after the replay: %q", m.Data)
				}
			}
			ev.publish(t, events.InstanceAgentLost, "web1", nil, nil)
			if m := c.next(t, "update"); m.ID != "7" {
				t.Errorf("live update after the replay: id %s, want 7", m.ID)
			}
			c.cancel()
			waitStreams(t, d, 0)
		})
	}
}

func TestStreamBadResume(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{})
	tests := []struct{ name, query, header, want string }{
		{"since not a number", "?since=abc", "", `invalid resume id "abc"`},
		{"since negative", "?since=-1", "", `invalid resume id "-1"`},
		{"header not a number", "", "x7", `invalid resume id "x7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/events"+tt.query, nil)
			if tt.header != "" {
				req.Header.Set("Last-Event-ID", tt.header)
			}
			res, body, _ := do(t, app, req)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("%d %q, want 400 saying %q", res.StatusCode, body, tt.want)
			}
		})
	}
}

// TestStreamDisconnect checks that closed tabs end their streams: the
// subscription is closed and no goroutine is left once clients go away.
func TestStreamDisconnect(t *testing.T) {
	noLeaks(t)
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), ev, Config{Heartbeat: 50 * time.Millisecond})
	url := server(t, app, d)
	var clients []*sseClient
	for i := range 5 {
		clients = append(clients, openStream(t, fmt.Sprintf("%s/events?since=%d", url, i), nil))
	}
	waitStreams(t, d, 5)
	for _, c := range clients {
		c.cancel()
	}
	waitStreams(t, d, 0)
	// Close ends the streams of a server about to shut down.
	openStream(t, url+"/events", nil)
	waitStreams(t, d, 1)
	d.Close()
	waitStreams(t, d, 0)
}

// TestStreamSlowClient checks that a page that stops reading neither holds
// up the others nor stays registered: its feed is dropped, the others get
// every event, and its stream ends once it goes away.
func TestStreamSlowClient(t *testing.T) {
	noLeaks(t)
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), ev, Config{Heartbeat: 100 * time.Millisecond})
	// A small queue, so that the burst below outgrows it whatever the
	// machine's socket buffers hold.
	d.hub.feedBuffer = 256
	url := server(t, app, d)
	addr := strings.TrimPrefix(url, "http://")
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if tc, ok := slow.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(slow, "GET /events HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	fast := openStream(t, url+"/events", nil)
	waitStreams(t, d, 2)

	const n = 3000
	for range n {
		ev.publish(t, events.InstanceAgentConnected, "web1", nil, nil)
	}
	// A burst that outruns a stream ends it; like a browser, the client
	// reconnects with Last-Event-ID and gets the rest, with no gap and no
	// duplicate.
	want, reconnects := 1, 0
	deadline := time.After(60 * time.Second)
	for want <= n {
		select {
		case m, ok := <-fast.msgs:
			if !ok {
				reconnects++
				fast = openStream(t, url+"/events", map[string]string{"Last-Event-ID": strconv.Itoa(want - 1)})
				continue
			}
			if m.Event != "update" {
				continue
			}
			if m.ID != strconv.Itoa(want) {
				t.Fatalf("fast client: update %s, want %d", m.ID, want)
			}
			want++
		case <-deadline:
			t.Fatalf("fast client got %d of %d events in 60s", want-1, n)
		}
	}
	t.Logf("%d events in a burst, %d reconnects", n, reconnects)
	d.hub.mu.Lock()
	feeds := len(d.hub.feeds)
	d.hub.mu.Unlock()
	if feeds != 1 {
		t.Errorf("%d feeds registered, want 1 (the slow page's dropped)", feeds)
	}
	// Every dropped feed is counted: the slow page's, and the fast one's
	// before each of its reconnects (unless the hub's own subscription
	// ended, which the bus counts).
	if st := d.StreamStats(); st.Open != 1 || st.Dropped < 1 || st.Dropped > uint64(reconnects)+1 {
		t.Errorf("StreamStats %+v, want 1 open and 1 to %d dropped", st, reconnects+1)
	}
	slow.Close()
	fast.cancel()
	waitStreams(t, d, 0)
}

// TestStreamBatchesStorm: events that come faster than streamFlushEvery go
// out together, each flush one HTTP chunk (one write on the connection): a
// stream pays its writes per period, not per event or per 4 KiB. The test
// publishes 40 events 2 ms apart (a storm's pace; an update is about 3.7 KB)
// and reads the raw chunked answer: every event arrives, in order, in at
// most 2 + elapsed/streamFlushEvery + bytes/streamBufferSize chunks (a
// write per event, as before, was 35 – 40).
func TestStreamBatchesStorm(t *testing.T) {
	noLeaks(t)
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), ev, Config{Heartbeat: time.Minute})
	url := server(t, app, d)
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer's head: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	waitStreams(t, d, 1)

	const n = 40
	began := time.Now()
	published := make(chan struct{})
	go func() {
		defer close(published)
		pace := time.NewTicker(2 * time.Millisecond)
		defer pace.Stop()
		for range n {
			ev.publish(t, events.InstanceAgentConnected, "web1", nil, nil)
			<-pace.C
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	next, chunks, updateBytes := 1, 0, 0
	for next <= n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a chunk's size (%d of %d events read): %v", next-1, n, err)
		}
		size, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil || size == 0 {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		data := make([]byte, size+2)
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "event: update") {
			continue
		}
		chunks++
		updateBytes += int(size)
		for _, l := range strings.Split(string(data), "\n") {
			if id, ok := strings.CutPrefix(l, "id: "); ok {
				if id != strconv.Itoa(next) {
					t.Fatalf("update %s, want %d", id, next)
				}
				next++
			}
		}
	}
	elapsed := time.Since(began)
	if most := 2 + int(elapsed/streamFlushEvery) + updateBytes/streamBufferSize; chunks > most || chunks >= n {
		t.Errorf("%d events in %d chunks over %v, want at most %d", n, chunks, elapsed, most)
	}
	t.Logf("%d events in %d chunks over %v", n, chunks, elapsed)
	<-published
	c.Close()
	waitStreams(t, d, 0)
}

// TestStreamHead: a HEAD of the live stream answers its headers and leaves
// nothing behind (its body is closed unwritten: no open stream, no feed in
// the hub), as a GET that ends does.
func TestStreamHead(t *testing.T) {
	noLeaks(t)
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(running("web1", instance.AgentConnected)), ev, Config{Heartbeat: time.Minute})
	url := server(t, app, d)
	for range 3 {
		req, _ := http.NewRequest(http.MethodHead, url+"/events", nil)
		tr := &http.Transport{DisableKeepAlives: true}
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		tr.CloseIdleConnections()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("HEAD /events: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	waitStreams(t, d, 0)
	d.hub.mu.Lock()
	feeds := len(d.hub.feeds)
	d.hub.mu.Unlock()
	if feeds != 0 {
		t.Errorf("%d feeds left in the hub after three HEADs, want 0", feeds)
	}
}
