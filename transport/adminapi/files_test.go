package adminapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// chunked hides a reader's length, so the request is sent chunked.
type chunked struct{ io.Reader }

// TestBodyLimitWithStreamedBodies checks that request bodies, streamed by
// the server since file pushes go to agents as they arrive, still obey the
// body limit on every other route: with a Content-Length or chunked, over
// the limit is 413, under it is served, and the connection after an
// answered body serves the next request. A file push without a relay is
// 501 whatever its size, never 413.
func TestBodyLimitWithStreamedBodies(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{BodyLimit: 4096})
	hc := httpClient(srv)
	big := `{"name":"x1","backend":"sim","config":{"user.big":"` + strings.Repeat("a", 20000) + `"}}`
	for _, tc := range []struct {
		name    string
		path    string
		ctype   string
		body    io.Reader
		code    int
		inError string
	}{
		{"over the limit, with a length", "/1.0/instances", "application/json", strings.NewReader(big), 413, "request body too large: the limit is 4096 bytes"},
		{"over the limit, chunked", "/1.0/instances", "application/json", chunked{strings.NewReader(big)}, 413, "request body too large: the limit is 4096 bytes"},
		{"under the limit, chunked", "/1.0/instances", "application/json", chunked{strings.NewReader(`{"name":"c1","backend":"sim"}`)}, 201, ""},
		{"under the limit, with a length", "/1.0/instances", "application/json", strings.NewReader(`{"name":"l1","backend":"sim"}`), 201, ""},
		{"file push over the limit", "/1.0/instances/l1/files?path=/big", "application/octet-stream", strings.NewReader(big), 501, "relays no guest files"},
		{"file push, wrong type", "/1.0/instances/l1/files?path=/big", "text/plain", strings.NewReader("x"), 501, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), "POST", "http://guestlink"+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.ctype)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(raw), tc.inError) {
				t.Errorf("%d %s, want %d %q", resp.StatusCode, raw, tc.code, tc.inError)
			}
			// The next request (the same connection when kept) is
			// read from its own start.
			if code, env := call(t, srv, "GET", "/1.0/instances?status=Stopped", ""); code != 200 {
				t.Errorf("next request: %d %s", code, env.Error)
			}
		})
	}
}
