package upstream_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/agenttest"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/devlxdapi"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/transport"
)

// rawDaemon is a daemon that misbehaves on purpose: after each request it
// answers and keeps the connection ("answer-keep"), answers and closes it
// without saying so ("answer-close": a kept-alive connection the daemon
// dropped), reads the request and hangs up without answering ("drop"), or
// never answers ("hang"), or closes each connection before its TLS
// handshake ("shed": a daemon shedding load).
type rawDaemon struct {
	mu       sync.Mutex
	conns    int
	requests []string
	mode     string // "answer-close", "drop", "hang"

	closed     chan struct{} // a connection was closed by the daemon
	halfClosed chan struct{} // "answer-closewrite": a connection's close_notify was sent
	got        chan struct{} // a request was read
	stop       chan struct{}
	ln         net.Listener
	wg         sync.WaitGroup
}

func startRawDaemon(t *testing.T, mode string, opts ...func(*upstream.Options)) (*rawDaemon, *upstream.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "glr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uds := filepath.Join(dir, "vm.sock")
	certs := agenttest.NewCerts(t)
	ln, err := net.Listen("unix", hybrid.HostPath(uds, 5000))
	if err != nil {
		t.Fatal(err)
	}
	d := &rawDaemon{mode: mode, closed: make(chan struct{}, 16), halfClosed: make(chan struct{}, 16), got: make(chan struct{}, 16), stop: make(chan struct{}),
		ln: tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{certs.Daemon.TLS()}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12})}
	d.wg.Add(1)
	go d.serve()
	t.Cleanup(func() { close(d.stop); d.ln.Close(); d.wg.Wait() })
	link, err := transport.Parse("hybrid:" + uds)
	if err != nil {
		t.Fatal(err)
	}
	o := upstream.Options{Link: link, Certificate: certs.Agent.TLS()}
	for _, f := range opts {
		f(&o)
	}
	c := upstream.New(o)
	t.Cleanup(c.CloseIdleConnections)
	if err := c.SetAdvertisement(&advert.Advertisement{CID: 2, Port: 5000, Certificate: string(certs.Daemon.CertPEM), Devlxd: true}); err != nil {
		t.Fatal(err)
	}
	return d, c
}

func (d *rawDaemon) serve() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns++
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { c.Close(); d.closed <- struct{}{} }()
			d.mu.Lock()
			shedding := d.mode == "shed"
			d.mu.Unlock()
			if shedding {
				return // closed before the TLS handshake, as a daemon shedding a storm
			}
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				d.mu.Lock()
				tooLarge := d.mode == "too-large"
				d.mu.Unlock()
				if tooLarge {
					// As fasthttp does past its body limit: answer
					// before reading the body, and hang up.
					d.mu.Lock()
					d.requests = append(d.requests, req.Method)
					d.mu.Unlock()
					const msg = "Request Entity Too Large"
					fmt.Fprintf(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				d.mu.Lock()
				d.requests = append(d.requests, req.Method)
				mode := d.mode
				d.mu.Unlock()
				d.got <- struct{}{}
				switch mode {
				case "answer-keep", "answer-close", "answer-closewrite":
					b, _ := devlxdapi.SyncResponse(nil)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
					if mode == "answer-keep" {
						continue
					}
					if mode == "answer-closewrite" {
						// The daemon's close as a relay (QEMU's
						// vsock device, the fleet host) passes it
						// on: close_notify and the end of the
						// stream reach the agent, its writes still
						// succeed. A request read now was written
						// on a closed connection: counted, not
						// answered.
						_ = c.(*tls.Conn).CloseWrite()
						d.halfClosed <- struct{}{}
						if _, err := http.ReadRequest(br); err == nil {
							d.mu.Lock()
							d.requests = append(d.requests, "late")
							d.mu.Unlock()
						}
					}
				case "hang":
					<-d.stop
				}
				return
			}
		}()
	}
}

func (d *rawDaemon) counts() (conns int, requests []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns, append([]string(nil), d.requests...)
}

func (d *rawDaemon) setMode(m string) {
	d.mu.Lock()
	d.mode = m
	d.mu.Unlock()
}

func do(c *upstream.Client, method string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var body []byte
	if method == http.MethodPatch {
		body = []byte(`{"state":"Ready"}`)
	}
	_, err := c.Do(ctx, method, "/1.0", body)
	return err
}

// A kept-alive connection the daemon closed is replaced by a new one, for
// a GET and for a PATCH that could not be written on it.
func TestStaleConnectionReplaced(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPatch} {
		t.Run(method, func(t *testing.T) {
			d, c := startRawDaemon(t, "answer-close")
			if err := do(c, http.MethodGet); err != nil {
				t.Fatalf("first GET: %v", err)
			}
			<-d.closed // the pooled connection is dead now
			if err := do(c, method); err != nil {
				t.Fatalf("%s on a dropped kept-alive connection: %v", method, err)
			}
			if conns, reqs := d.counts(); conns != 2 || len(reqs) != 2 {
				t.Fatalf("daemon saw %d connections, requests %v; want 2, 2", conns, reqs)
			}
		})
	}
}

// A PATCH the daemon read but did not answer is not sent again (it may
// have been acted on); a GET is, once, on a new connection.
func TestNoReplayOfWrittenPatch(t *testing.T) {
	for _, tt := range []struct {
		method, path string
		want         int // requests the daemon read: the first GET, the request, its replay if any
	}{
		{http.MethodPatch, "/1.0/devices", 2}, // may have been acted on: not sent again
		{http.MethodPut, "/1.0", 2},
		{http.MethodPatch, "/1.0", 3}, // the state declaration: a replay is a repeat
		{http.MethodGet, "/1.0", 3},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			d, c := startRawDaemon(t, "answer-keep")
			if err := do(c, http.MethodGet); err != nil {
				t.Fatalf("first GET: %v", err)
			}
			// The pooled connection stays open; its daemon side drops
			// the next request it reads (and the replay's).
			d.setMode("drop")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var body []byte
			if tt.method != http.MethodGet {
				body = []byte(`{"state":"Ready"}`)
			}
			_, err := c.Do(ctx, tt.method, tt.path, body)
			if !errors.Is(err, upstream.ErrUnreachable) {
				t.Fatalf("%s %s dropped by the daemon = %v, want ErrUnreachable", tt.method, tt.path, err)
			}
			if _, reqs := d.counts(); len(reqs) != tt.want {
				t.Fatalf("daemon read requests %v, want %d", reqs, tt.want)
			}
		})
	}
}

// A connection left idle is closed by the agent past its idle timeout
// (Options.IdleTimeout; the default, minutes, outlasts the daemon's own, so
// there the daemon closes first); a request made while it is idle reuses it.
func TestIdleConnectionClosed(t *testing.T) {
	const idle = 200 * time.Millisecond
	d, c := startRawDaemon(t, "answer-keep", func(o *upstream.Options) { o.IdleTimeout = idle })
	for range 2 {
		if err := do(c, http.MethodGet); err != nil {
			t.Fatal(err)
		}
	}
	if conns, reqs := d.counts(); conns != 1 || len(reqs) != 2 {
		t.Fatalf("daemon saw %d connections for %d requests, want 1 for 2", conns, len(reqs))
	}
	select {
	case <-d.closed: // the daemon read EOF: the agent closed it
	case <-time.After(100 * idle):
		t.Fatalf("the idle connection is still open %v after its last request", 100*idle)
	}
	if err := do(c, http.MethodGet); err != nil {
		t.Fatal(err)
	}
	if conns, _ := d.counts(); conns != 2 {
		t.Fatalf("daemon saw %d connections, want a new one after the idle close", conns)
	}
}

// The daemon's side of a kept connection: it closes idle connections (its
// budget, its idle timeout), and the agent finds a closed one before
// writing on it. Tried: the daemon closing each connection after its
// answer (the agent's next request, a GET and a PATCH, goes on a new
// connection, no error, the closed one never written to: the daemon reads
// exactly one request per connection; "answer-close": the daemon's socket
// closed, so a write fails; "answer-closewrite": a relay's end, where the
// write would succeed and the request be lost), several dead connections in
// the pool at once (all skipped, one dial), and the default idle timeout
// kept for minutes (requests in turn reuse one connection).
func TestClosedKeptConnectionNotWritten(t *testing.T) {
	t.Run("kept-for-minutes", func(t *testing.T) {
		if upstream.IdleTimeout < time.Minute {
			t.Fatalf("upstream.IdleTimeout = %v, want minutes (the daemon closes first)", upstream.IdleTimeout)
		}
		d, c := startRawDaemon(t, "answer-keep")
		for range 3 {
			if err := do(c, http.MethodPatch); err != nil {
				t.Fatal(err)
			}
		}
		if conns, reqs := d.counts(); conns != 1 || len(reqs) != 3 {
			t.Fatalf("daemon saw %d connections for %v, want 1 for 3", conns, reqs)
		}
	})
	for _, tc := range []struct{ mode, method string }{
		{"answer-close", http.MethodGet}, {"answer-close", http.MethodPatch},
		{"answer-closewrite", http.MethodGet}, {"answer-closewrite", http.MethodPatch},
	} {
		method := tc.method
		t.Run(tc.mode+"/"+method, func(t *testing.T) {
			d, c := startRawDaemon(t, tc.mode)
			// Three requests at once leave three connections in the
			// pool, each closed by the daemon after its answer.
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for range 3 {
				wg.Go(func() { errs <- do(c, http.MethodGet) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// Every connection the daemon took is closed (or its
			// close_notify sent) before the next request. (Three at once
			// may have made more than three: a connection answered and
			// pooled can be taken again before its close is sent, as
			// between any client and server; that request then went on
			// a new one.)
			conns0, reqs0 := d.counts()
			shut := d.closed
			if tc.mode == "answer-closewrite" {
				shut = d.halfClosed
			}
			for range conns0 {
				<-shut
			}
			if err := do(c, method); err != nil {
				t.Fatalf("%s with only closed connections in the pool: %v", method, err)
			}
			conns, reqs := d.counts()
			if conns != conns0+1 || !slices.Equal(reqs[len(reqs0):], []string{method}) {
				t.Fatalf("daemon saw %d connections (%d before) and requests %v (%v before); want one new connection carrying the %s, nothing written on a closed one", conns, conns0, reqs, reqs0, method)
			}
		})
	}
}

// A body the daemon refuses as too large before reading it, hanging up,
// gets the daemon's 413, not the broken pipe of the unfinished write.
func TestEarlyAnswerToTooLargeBody(t *testing.T) {
	d, c := startRawDaemon(t, "too-large")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := append(append([]byte(`{"state":"Ready","message":"`), make([]byte, 4<<20)...), '"', '}')
	for i := range body[28 : len(body)-2] {
		body[28+i] = 'x'
	}
	resp, err := c.Raw(ctx, http.MethodPatch, "/1.0", body)
	if err != nil {
		t.Fatalf("PATCH of %d bytes: %v, want the daemon's 413", len(body), err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || string(got) != "Request Entity Too Large" {
		t.Fatalf("answer %d %q, want 413", resp.StatusCode, got)
	}
	// The connection is not reused: the next request dials.
	d.setMode("answer-keep")
	if err := do(c, http.MethodGet); err != nil {
		t.Fatal(err)
	}
	if conns, _ := d.counts(); conns != 2 {
		t.Fatalf("daemon saw %d connections, want 2", conns)
	}
}

// Cancelling the caller's context ends a request the daemon does not answer
// at once, with the context's error.
func TestCancelWhileWaiting(t *testing.T) {
	d, c := startRawDaemon(t, "hang")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-d.got; cancel() }()
	_, err := c.Do(ctx, http.MethodGet, "/1.0", nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, upstream.ErrUnreachable) {
		t.Fatalf("cancelled GET = %v, want context.Canceled and ErrUnreachable", err)
	}
}

// An answer whose body is closed before its end does not leave its
// connection in the pool; one read to the end does.
func TestEarlyCloseDropsConnection(t *testing.T) {
	d, c := setup(t, false)
	if err := c.SetAdvertisement(d.Advertisement()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := c.Raw(ctx, http.MethodGet, "/1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // unread
	for i := 0; i < 3; i++ {
		if err := get(t, c); err != nil {
			t.Fatal(err)
		}
	}
	resp, err = c.Raw(ctx, http.MethodHead, "/1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // a HEAD answer has no body: at its end
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	d.Lock()
	conns, reqs := d.Conns, d.Requests
	d.Unlock()
	if conns != 2 || reqs != 6 {
		t.Fatalf("daemon saw %d connections, %d requests; want 2, 6", conns, reqs)
	}
}

// Requests that cannot be written as HTTP/1.1 are refused before sending.
func TestMalformedRequestRefused(t *testing.T) {
	d, c := setup(t, false)
	if err := c.SetAdvertisement(d.Advertisement()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ method, path, auth string }{
		{"GET", "/1.0 HTTP/1.1\r\nX: y", ""},
		{"GET", "/1.0\n", ""},
		{"", "/1.0", ""},
		{"G ET", "/1.0", ""},
		{"GET", "1.0", ""},
		{"GET", "/1.0", "Bearer x\r\nX-Evil: 1"},
	} {
		if _, err := c.RawAuth(context.Background(), tt.method, tt.path, nil, tt.auth); err == nil || errors.Is(err, upstream.ErrUnreachable) {
			t.Errorf("RawAuth(%q, %q, auth %q) = %v, want a refusal before sending", tt.method, tt.path, tt.auth, err)
		}
	}
	// A guest's If-Match is forwarded too (an ETag of the trusted API):
	// one that would split the header is refused the same way.
	if _, err := c.RawHeader(context.Background(), "PATCH", "/1.0", nil, upstream.Header{IfMatch: "\"x\"\r\nX-Evil: 1"}); err == nil || errors.Is(err, upstream.ErrUnreachable) {
		t.Errorf("RawHeader with a split If-Match = %v, want a refusal before sending", err)
	}
	d.Lock()
	defer d.Unlock()
	if d.Requests != 0 {
		t.Fatalf("daemon got %d requests", d.Requests)
	}
}

// A new advertisement closes the previous daemon's pooled connections; the
// requests after it dial anew.
func TestReadvertisementDropsPool(t *testing.T) {
	d, c := setup(t, false)
	for i := 0; i < 3; i++ {
		if err := c.SetAdvertisement(d.Advertisement()); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2; j++ {
			if err := get(t, c); err != nil {
				t.Fatalf("GET %d after advertisement %d: %v", j, i, err)
			}
		}
	}
	d.Lock()
	defer d.Unlock()
	if d.Conns != 3 || d.Requests != 6 {
		t.Fatalf("daemon saw %d connections, %d requests; want 3, 6", d.Conns, d.Requests)
	}
}

// TestShedConnection: a daemon that accepts and closes a connection
// before its TLS handshake (as the devlxd server sheds a storm's
// connections that waited too long for a handshake slot) is reported as
// unreachable and shed (ErrShed), so the agent stays CONNECTED; a daemon
// whose listener is gone (refused) is unreachable but not shed, and so is
// a TLS refusal (another pinned certificate: TestPinning's case).
func TestShedConnection(t *testing.T) {
	d, c := startRawDaemon(t, "shed")
	err := do(c, http.MethodPatch)
	if !errors.Is(err, upstream.ErrUnreachable) || !errors.Is(err, upstream.ErrShed) {
		t.Fatalf("a shed connection = %v, want ErrUnreachable and ErrShed", err)
	}
	if _, reqs := d.counts(); len(reqs) != 0 {
		t.Fatalf("the daemon read requests %v", reqs)
	}
	d.ln.Close()
	err = do(c, http.MethodGet)
	if !errors.Is(err, upstream.ErrUnreachable) || errors.Is(err, upstream.ErrShed) {
		t.Fatalf("a refused connection = %v, want ErrUnreachable, not ErrShed", err)
	}
}
