package devlxdconf

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCompareCatchesDifferences runs rows of the suite against a server
// that answers each one nearly right: the suite must see every difference
// (a status, a content type, one byte of body), and accept exact answers.
func TestCompareCatchesDifferences(t *testing.T) {
	answers := map[string]struct {
		status      int
		ctype, body string
	}{
		"/":                     {200, "application/json", `["/1.0"]` + "\n"},                                                // exact
		"/1.0/config/user.foo":  {200, "application/octet-stream", "bar\n"},                                                  // extra newline
		"/1.0/meta-data":        {200, "text/plain", "instance-id: i\nlocal-hostname: n\nvendor: acme\nregion: \"eu %s\"\n"}, // wrong type only
		"/1.0/nope":             {200, "application/json", `["/1.0"]` + "\n"},                                                // LXD's quirk
		"/1.0/config/user.nope": {404, "text/plain; charset=utf-8", "Not Found"},                                             // no newline
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", a.ctype)
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	defer srv.Close()
	// Every request goes to srv whatever its host (devlxd's is "lxd").
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		},
	}}
	defer client.CloseIdleConnections()
	rows := map[string]request{}
	for _, r := range requests(Guest{Name: "n", InstanceID: "i", Location: "h", InstanceType: "virtual-machine"}) {
		rows[r.name] = r
	}
	for _, tt := range []struct {
		row    string
		passes bool
	}{
		{"root", true},
		{"config value", false},
		{"meta-data", false},
		{"unknown path", false},
		{"config unset", false},
	} {
		t.Run(tt.row, func(t *testing.T) {
			r, ok := rows[tt.row]
			if !ok {
				t.Fatalf("no row %q", tt.row)
			}
			err := compare(Target{Form: FormGuest, Client: client}, r)
			if (err == nil) != tt.passes {
				t.Fatalf("compare(%s) = %v, want passes=%v", tt.row, err, tt.passes)
			}
			if err != nil && !strings.Contains(err.Error(), r.path) {
				t.Fatalf("the difference does not name the request: %v", err)
			}
		})
	}
}
