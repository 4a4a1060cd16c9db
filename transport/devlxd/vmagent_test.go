package devlxd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/devlxdproxy"
	"github.com/guestlink/guestlink/agent/eventhub"
	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db/dbtest"
)

// linkUpstream is the agent's view of the daemon over the test link: each
// request goes over TLS to the real devlxd server, failures are the
// upstream's ErrUnreachable as the agent's client reports them.
type linkUpstream struct{ c *http.Client }

func (l linkUpstream) Raw(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	return l.RawHeader(ctx, method, path, body, upstream.Header{})
}

func (l linkUpstream) RawHeader(ctx context.Context, method, path string, body []byte, h upstream.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://guestlink"+path, rd)
	if err != nil {
		return nil, err
	}
	if h.Authorization != "" {
		req.Header.Set("Authorization", h.Authorization)
	}
	if h.IfMatch != "" {
		req.Header.Set("If-Match", h.IfMatch)
	}
	resp, err := l.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", upstream.ErrUnreachable, method, path, err)
	}
	return resp, nil
}

// guestSocket serves the agent's /dev/lxd/sock proxy for instance uuid of e
// in a temporary directory and returns a client of it.
func guestSocket(t *testing.T, e *env, uuid, name string) *http.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "gvm") // short: a socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &devlxdproxy.Server{Path: filepath.Join(dir, "sock"), Handler: &devlxdproxy.Handler{
		Upstream: linkUpstream{e.client(uuid, e.agents[name])},
		Events:   &eventhub.Hub{},
	}}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.Path)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// guestAnswer is what the guest reads on its socket.
type guestAnswer struct {
	status      int
	ctype, body string
	etag        string
}

func guestDo(t *testing.T, c *http.Client, method, path, body string, headers ...string) guestAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://lxd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return guestAnswer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b), resp.Header.Get("Etag")}
}

// TestGuestAnswersByType runs the guest's requests through the agent's
// proxy and the daemon's devlxd, for a container and a VM guest: where
// LXD's VM agent (lxd-agent) answers otherwise than its container server,
// the VM guest reads the agent's bytes (docs/devlxd.md).
func TestGuestAnswersByType(t *testing.T) {
	const text = "text/plain; charset=utf-8"
	const bearer = "Bearer "
	for _, typ := range guestTypes {
		t.Run(string(typ), func(t *testing.T) {
			st, err := storage.New(t.TempDir(), dbtest.SQLite(t).(storage.Store), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, func(c *Config) {
				c.InstanceTypes = typ
				c.Storage = st
				c.Tokens = fakeTokens{tokA: {Name: "csi", Instances: []string{"a"}}}
			})
			e.insts.setConfig(uuidA, KeyManagementVolumes, "true")
			g := guestSocket(t, e, uuidA, "a")
			vm := typ == "virtual-machine"
			pick := func(container, virtualMachine guestAnswer) guestAnswer {
				if vm {
					return virtualMachine
				}
				return container
			}
			const vol = "/1.0/storage-pools/default/volumes/custom/v1"
			for _, r := range []struct {
				name, method, path, body string
				headers                  []string
				want                     guestAnswer
			}{
				{"root", "GET", "/", "", nil, guestAnswer{200, "application/json", `["/1.0"]` + "\n", ""}},
				{"method a route does not serve", "POST", "/1.0", "{}", nil,
					pick(guestAnswer{501, text, "Not Implemented\n", ""}, guestAnswer{501, text, "\n", ""})},
				{"state not JSON", "PATCH", "/1.0", `{"state":`, nil,
					pick(guestAnswer{400, text, "Invalid request body: unexpected EOF\n", ""}, guestAnswer{500, text, "unexpected EOF\n", ""})},
				{"state of the wrong type", "PATCH", "/1.0", `{"state":true}`, nil,
					pick(guestAnswer{400, text, "Invalid request body: json: cannot unmarshal bool into Go struct field DevLXDPut.state of type string\n", ""},
						guestAnswer{500, text, "json: cannot unmarshal bool into Go struct field DevLXDPut.state of type string\n", ""})},
				{"state invalid (the host's answer in both)", "PATCH", "/1.0", `{"state":"Running"}`, nil, guestAnswer{400, text, "Invalid state \"Running\"\n", ""}},
				{"create a volume", "POST", "/1.0/storage-pools/default/volumes", `{"name":"v1","config":{"size":"1MiB"}}`, []string{"Authorization", bearer + tokA}, guestAnswer{status: 200}},
				{"volume with its ETag", "GET", vol, "", []string{"Authorization", bearer + tokA},
					guestAnswer{200, "application/json", `{"name":"v1","description":"","pool":"default","type":"custom","content_type":"block","config":{"size":"1MiB","volatile.devlxd.owner":"devlxd/csi"},"location":"none"}` + "\n",
						lxdETag(`["v1","custom",{"size":"1MiB","volatile.devlxd.owner":"devlxd/csi"}]`)}},
				{"stale If-Match relayed", "PATCH", vol, `{"description":"x"}`, []string{"Authorization", bearer + tokA, "If-Match", `"0"`},
					guestAnswer{412, text, "ETag does not match: " + strings.Trim(lxdETag(`["v1","custom",{"size":"1MiB","volatile.devlxd.owner":"devlxd/csi"}]`), `"`) + " vs 0. The configuration has been modified since this change began. Please retrieve the updated configuration before proceeding.\n", ""}},
				{"PUT of a volume (lxd-agent routes PATCH only)", "PUT", vol, `{"description":"x"}`, []string{"Authorization", bearer + tokA},
					pick(guestAnswer{status: 200}, guestAnswer{501, text, "\n", ""})},
				{"volumes without recursion (lxd-agent always recurses)", "GET", "/1.0/storage-pools/default/volumes", "", []string{"Authorization", bearer + tokA},
					pick(guestAnswer{501, text, "Only recursive requests are currently supported\n", ""}, guestAnswer{status: 200})},
				{"volumes of another type (lxd-agent drops the type)", "GET", "/1.0/storage-pools/default/volumes/container?recursion=1", "", []string{"Authorization", bearer + tokA},
					pick(guestAnswer{400, text, "Only custom storage volume requests are allowed\n", ""}, guestAnswer{status: 200})},
			} {
				t.Run(r.name, func(t *testing.T) {
					got := guestDo(t, g, r.method, r.path, r.body, r.headers...)
					if r.want.ctype == "" { // the status is the point (an operation, a list)
						got = guestAnswer{status: got.status}
					}
					if got != r.want {
						t.Fatalf("%s %s:\n got %+v\nwant %+v", r.method, r.path, got, r.want)
					}
				})
			}

			// The daemon goes away: LXD's VM agent still lists the API
			// versions; a container's devlxd is the host's, so it fails.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			got := guestDo(t, g, "GET", "/", "")
			want := pick(guestAnswer{500, text, "Failed connecting to devLXD over vsock: daemon unreachable\n", ""}, guestAnswer{200, "application/json", `["/1.0"]` + "\n", ""})
			if got != want {
				t.Fatalf("GET / with the daemon down:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
