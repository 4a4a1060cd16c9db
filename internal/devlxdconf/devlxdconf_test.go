package devlxdconf

import (
	"context"
	"fmt"
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
		// api_version before state: guestlink's old order, not LXD's.
		"/1.0": {200, "application/json", `{"api_version":"1.0","state":"Started","instance_type":"virtual-machine","location":"h","auth":"untrusted","supported_storage_drivers":[]}` + "\n"},
		// The right fields in LXD's order.
		"/1.0/ubuntu-pro": {200, "application/json", `{"guest_attach":"off"}` + "\n"},
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
		{"info", false},
		{"ubuntu-pro", true},
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

// TestLXDObject checks the bodies built from the record of LXD's types:
// GET /1.0 with the embedded state first (LXD's DevLXDGetUntrusted), the
// trusted form with the environment last, and the refusals that keep the
// suite's values and the record in step.
func TestLXDObject(t *testing.T) {
	g := Guest{Location: "h", InstanceType: "container"}
	if got, want := Info(g, "Ready"), `{"state":"Ready","api_version":"1.0","instance_type":"container","location":"h","auth":"untrusted","supported_storage_drivers":[]}`; got != want {
		t.Errorf("Info = %s\nwant %s", got, want)
	}
	if got, want := TrustedInfo(g, "Started"), `{"state":"Started","api_version":"1.0","instance_type":"container","location":"h","auth":"trusted","supported_storage_drivers":[],"environment":{"server_clustered":false}}`; got != want {
		t.Errorf("TrustedInfo = %s\nwant %s", got, want)
	}
	for _, tt := range []struct {
		name   string
		typ    string
		values map[string]string
	}{
		{"missing field", "DevLXDInstance", map[string]string{"name": `"a"`}},
		{"unknown field", "DevLXDUbuntuProSettings", map[string]string{"guest_attach": `"off"`, "extra": "1"}},
		{"unknown type", "DevLXDNope", map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("LXDObject(%s, %v) did not refuse", tt.typ, tt.values)
				}
			}()
			LXDObject(tt.typ, tt.values)
		})
	}
}

// TestParseTypes checks the reading of lxd_types.txt: embedding, omitempty
// and the mistakes it refuses.
func TestParseTypes(t *testing.T) {
	types, err := parseTypes("# c\nA x y?\nB ...A z\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(types["B"]); got != "[{x false} {y true} {z false}]" {
		t.Fatalf("B = %s", got)
	}
	for _, bad := range []string{"A x x", "B ...A", "A x\nA y", "A ?"} {
		if _, err := parseTypes(bad); err == nil {
			t.Errorf("parseTypes(%q) accepted it", bad)
		}
	}
}
