package adminapi_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// metricsStub stands for core/metrics' handler: the API only routes to it.
var metricsStub = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = io.WriteString(w, "# TYPE stub_total counter\nstub_total 1\n")
})

// get sends GET path with hdr through c and returns the status and body.
func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v // net/http sends req.Host, not the header
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsRoute checks who may read /metrics: the admin socket, a
// bearer token or a trusted certificate on TCP (401 without: see
// TestUnauthenticatedTCP's routes); a foreign Host is refused; a daemon
// without metrics has no such route.
func TestMetricsRoute(t *testing.T) {
	as := newAuthServer(t)
	token := as.BearerToken(t, "prom")
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", as.Socket)
	}}}
	t.Cleanup(unix.CloseIdleConnections)
	tcp := &http.Client{}
	tests := []struct {
		name   string
		client *http.Client
		url    string
		hdr    map[string]string
		code   int
	}{
		{"admin socket", unix, "http://guestlink/metrics", nil, 200},
		{"bearer token", tcp, "http://" + as.httpAddr + "/metrics", map[string]string{"Authorization": "Bearer " + token}, 200},
		{"no token", tcp, "http://" + as.httpAddr + "/metrics", nil, 401},
		{"foreign host", tcp, "http://" + as.httpAddr + "/metrics", map[string]string{"Authorization": "Bearer " + token, "Host": "evil.example"}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, tt.client, tt.url, tt.hdr)
			if code != tt.code {
				t.Fatalf("%d %s, want %d", code, body, tt.code)
			}
			if code == 200 && !strings.Contains(body, "stub_total 1") {
				t.Fatalf("body %q is not the metrics handler's", body)
			}
		})
	}

	plain := apitest.NewServer(t, apitest.Options{})
	code, _ := call(t, plain, "GET", "/metrics", "")
	if code != 404 {
		t.Fatalf("GET /metrics without a metrics handler: %d, want 404", code)
	}
}
