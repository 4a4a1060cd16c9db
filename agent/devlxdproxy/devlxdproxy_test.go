package devlxdproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/agent/eventhub"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// fakeUpstream answers every request with a fixed response or error; this is
// a unit test of the proxy alone (the agent's process tests use a daemon).
type fakeUpstream struct {
	status int
	ctype  string
	body   string
	err    error

	header http.Header // extra answer headers

	mu      sync.Mutex
	seen    []string
	auths   []string
	ifMatch []string
}

func (f *fakeUpstream) RawHeader(ctx context.Context, method, path string, body []byte, h upstream.Header) (*http.Response, error) {
	f.mu.Lock()
	f.auths = append(f.auths, h.Authorization)
	f.ifMatch = append(f.ifMatch, h.IfMatch)
	f.mu.Unlock()
	return f.Raw(ctx, method, path, body)
}

func (f *fakeUpstream) Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	f.mu.Lock()
	f.seen = append(f.seen, method+" "+path+" "+string(body))
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	hdr := http.Header{"Content-Type": {f.ctype}}
	for k, v := range f.header {
		hdr[k] = v
	}
	return &http.Response{
		StatusCode: f.status,
		Header:     hdr,
		Body:       io.NopCloser(strings.NewReader(f.body)),
	}, nil
}

func serve(t *testing.T, h *Handler) (*Server, *http.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gdp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{Path: filepath.Join(dir, "lxd", "sock"), Handler: h}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.Path)
		},
	}}
	return s, c
}

func TestForward(t *testing.T) {
	sync200 := func(v any) string { b, _ := devlxdapi.SyncResponse(v); return string(b) }
	tests := []struct {
		name       string
		up         *fakeUpstream
		method     string
		path, body string
		wantStatus int
		wantCT     string
		wantBody   string
		declared   string
	}{
		{"raw value", &fakeUpstream{status: 200, ctype: "application/json", body: sync200("a\n%s")}, "GET", "/1.0/config/user.x", "", 200, "application/octet-stream", "a\n%s", ""},
		{"query kept", &fakeUpstream{status: 200, ctype: "application/json", body: sync200([]string{})}, "GET", "/1.0/config?recursion=1", "", 200, "application/json", "[]\n", ""},
		{"patch declares", &fakeUpstream{status: 200, ctype: "application/json", body: sync200(nil)}, "PATCH", "/1.0", `{"state":"Ready"}`, 200, "application/octet-stream", "", "Ready"},
		{"patch refused", &fakeUpstream{status: 403, ctype: "application/json", body: string(devlxdapi.ErrorResponse(403, ""))}, "PATCH", "/1.0", `{"state":"Ready"}`, 403, "text/plain; charset=utf-8", "Forbidden\n", ""},
		{"bad envelope", &fakeUpstream{status: 200, ctype: "application/json", body: "{nope"}, "GET", "/1.0", "", 502, "text/plain; charset=utf-8", "Bad Gateway: invalid answer from the host\n", ""},
		{"plain error passed", &fakeUpstream{status: 401, ctype: "text/plain", body: "Unauthorized\n"}, "GET", "/1.0", "", 401, "text/plain; charset=utf-8", "Unauthorized\n", ""},
		{"binary passed", &fakeUpstream{status: 200, ctype: "application/octet-stream", body: "\x00\x01image"}, "GET", "/1.0/images/abc/export", "", 200, "application/octet-stream", "\x00\x01image", ""},
		{"no advertisement", &fakeUpstream{err: upstream.ErrNoAdvertisement}, "GET", "/1.0", "", 500, "text/plain; charset=utf-8", "Failed connecting to devLXD over vsock: no daemon advertised yet\n", ""},
		// The guest is told the kind of failure, never the error: a hybrid
		// link's dial error names a host path.
		{"unreachable", &fakeUpstream{err: fmt.Errorf("%w: GET /1.0: dial unix /var/lib/guestlink/guests/web1/link.sock: connect: connection refused", upstream.ErrUnreachable)}, "GET", "/1.0", "", 500, "text/plain; charset=utf-8", "Failed connecting to devLXD over vsock: daemon unreachable\n", ""},
		{"timeout", &fakeUpstream{err: fmt.Errorf("%w: %w", upstream.ErrUnreachable, context.DeadlineExceeded)}, "GET", "/1.0", "", 500, "text/plain; charset=utf-8", "Failed connecting to devLXD over vsock: daemon unreachable\n", ""},
		{"options answered locally", &fakeUpstream{status: 200, ctype: "application/json", body: sync200(nil)}, "OPTIONS", "/1.0", "", 404, "text/plain; charset=utf-8", "Method \"OPTIONS\" not found\n", ""},
		{"custom method answered locally", &fakeUpstream{status: 200, ctype: "application/json", body: sync200(nil)}, "PROPFIND", "/nope", "", 404, "text/plain; charset=utf-8", "Method \"PROPFIND\" not found\n", ""},
		{"head error", &fakeUpstream{status: 501, ctype: "application/json"}, "HEAD", "/1.0", "", 501, "text/plain; charset=utf-8", "", ""},
		{"head unknown path", &fakeUpstream{status: 404, ctype: "application/json"}, "HEAD", "/nope", "", 404, "text/plain; charset=utf-8", "", ""},
		{"image error relayed", &fakeUpstream{status: 403, ctype: "application/json", body: string(devlxdapi.ErrorResponse(403, ""))}, "GET", "/1.0/images/abc/export", "", 403, "application/json", string(devlxdapi.ErrorResponse(403, "")), ""},
		{"body too large", &fakeUpstream{status: 200, ctype: "application/json", body: sync200(nil)}, "PATCH", "/1.0", strings.Repeat("x", MaxBody+1), 413, "text/plain; charset=utf-8", "Request body too large (limit 1048576 bytes)\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var declared string
			unreachable := 0
			h := &Handler{
				Upstream:      tt.up,
				Events:        &eventhub.Hub{},
				OnDeclared:    func(put devlxdapi.StatePut) { declared = put.State },
				OnUnreachable: func(error) { unreachable++ },
			}
			_, c := serve(t, h)
			req, _ := http.NewRequest(tt.method, "http://lxd"+tt.path, strings.NewReader(tt.body))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != tt.wantCT || string(b) != tt.wantBody {
				t.Fatalf("got %d %q %q, want %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.wantStatus, tt.wantCT, tt.wantBody)
			}
			if declared != tt.declared {
				t.Fatalf("declared %q, want %q", declared, tt.declared)
			}
			if wantUnreach := tt.up.err != nil && tt.up.err != upstream.ErrNoAdvertisement; (unreachable > 0) != wantUnreach {
				t.Fatalf("OnUnreachable called %d times, want called=%v", unreachable, wantUnreach)
			}
			local := tt.wantStatus == 404 && tt.method != "HEAD"
			if local && len(tt.up.seen) > 0 {
				t.Fatalf("a method LXD does not route reached the daemon: %q", tt.up.seen)
			}
			if tt.wantStatus != 413 && !local && !strings.HasPrefix(tt.up.seen[0], tt.method+" "+tt.path+" ") {
				t.Fatalf("upstream saw %q, want %s %s", tt.up.seen[0], tt.method, tt.path)
			}
		})
	}
}

func TestWebsocketDropsSilentClient(t *testing.T) {
	hub := &eventhub.Hub{}
	h := &Handler{Upstream: &fakeUpstream{}, Events: hub, PingPeriod: 50 * time.Millisecond, PongWait: 300 * time.Millisecond}
	s, _ := serve(t, h)
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.Path)
	}}
	// A client that reads answers pings with pongs and stays.
	live, _, err := dialer.Dial("ws://lxd/1.0/events", nil)
	if err != nil {
		t.Fatalf("dial live: %v", err)
	}
	defer live.Close()
	go func() {
		for {
			if _, _, err := live.ReadMessage(); err != nil {
				return
			}
		}
	}()
	// A client that never reads never answers pings.
	silent, _, err := dialer.Dial("ws://lxd/1.0/events?type=device", nil)
	if err != nil {
		t.Fatalf("dial silent: %v", err)
	}
	defer silent.Close()
	if !testwait.Until(20*time.Second, func() bool { return hub.Len() == 2 }) {
		t.Fatalf("subscriptions = %d, want 2", hub.Len())
	}
	if !testwait.Until(20*time.Second, func() bool { return hub.Len() == 1 }) {
		t.Fatalf("silent client not dropped: %d subscriptions", hub.Len())
	}
	// Stop ends the remaining stream and removes the socket.
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(s.Path); !os.IsNotExist(err) {
		t.Fatalf("socket still there after Stop: %v", err)
	}
	if hub.Len() != 0 {
		t.Fatalf("subscriptions after Stop = %d", hub.Len())
	}
}

// flakyUpstream fails the first fails requests with err, then answers
// meta-data.
type flakyUpstream struct {
	fails int
	err   error

	mu    sync.Mutex
	calls int
}

func (f *flakyUpstream) Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return nil, f.err
	}
	b, _ := devlxdapi.SyncResponse("instance-id: x\n")
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(string(b)))}, nil
}

// RawHeader is Raw: the retry does not depend on the headers.
func (f *flakyUpstream) RawHeader(ctx context.Context, method, path string, body []byte, _ upstream.Header) (*http.Response, error) {
	return f.Raw(ctx, method, path, body)
}

// TestMetaDataRetry checks LXD's agent's retry: GET /1.0/meta-data tries
// the daemon up to 10 times while it cannot be reached, other requests and
// timeouts once.
func TestMetaDataRetry(t *testing.T) {
	refused := fmt.Errorf("%w: refused", upstream.ErrUnreachable)
	tests := []struct {
		name       string
		path       string
		fails      int
		err        error
		wantStatus int
		wantCalls  int
	}{
		{"recovers", "/1.0/meta-data", 3, refused, 200, 4},
		{"last attempt succeeds", "/1.0/meta-data", MetaDataAttempts - 1, refused, 200, MetaDataAttempts},
		{"gives up", "/1.0/meta-data", 1000, refused, 500, MetaDataAttempts},
		{"no advertisement retried", "/1.0/meta-data", 2, upstream.ErrNoAdvertisement, 200, 3},
		{"timeout not retried", "/1.0/meta-data", 1000, fmt.Errorf("%w: %w", upstream.ErrUnreachable, context.DeadlineExceeded), 500, 1},
		{"other path not retried", "/1.0", 1000, refused, 500, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &flakyUpstream{fails: tt.fails, err: tt.err}
			_, c := serve(t, &Handler{Upstream: up, Events: &eventhub.Hub{}, RetryWait: time.Millisecond})
			resp, err := c.Get("http://lxd" + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET %s = %d %q, want %d", tt.path, resp.StatusCode, b, tt.wantStatus)
			}
			if tt.wantStatus == 500 && !strings.HasPrefix(string(b), "Failed connecting to devLXD over vsock: ") {
				t.Fatalf("500 body %q", b)
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			if up.calls != tt.wantCalls {
				t.Fatalf("daemon asked %d times, want %d", up.calls, tt.wantCalls)
			}
		})
	}
}

// TestForwardAuthorization checks that the guest's bearer token reaches
// the daemon unchanged, and that no header is invented without one.
func TestForwardAuthorization(t *testing.T) {
	for _, tt := range []struct{ name, header string }{
		{"bearer", "Bearer gld_abc"},
		{"none", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := devlxdapi.SyncResponse(map[string]string{})
			up := &fakeUpstream{status: 200, ctype: "application/json", body: string(body)}
			_, c := serve(t, &Handler{Upstream: up, Events: &eventhub.Hub{}})
			req, _ := http.NewRequest("GET", "http://lxd/1.0/instances/a", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			up.mu.Lock()
			defer up.mu.Unlock()
			if len(up.auths) != 1 || up.auths[0] != tt.header {
				t.Fatalf("forwarded Authorization %q, want [%q]", up.auths, tt.header)
			}
		})
	}
}
