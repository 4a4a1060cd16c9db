package devlxd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func TestEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	mac0 := guestview.GeneratedMAC(uuidA, "eth0")
	tests := []struct {
		name   string
		c      *http.Client
		method string
		path   string
		body   string
		want   answer
	}{
		{"root", a, "GET", "/", "", sync200(`["/1.0"]`)},
		{"info started", a, "GET", "/1.0", "", sync200(`{"state":"Started","api_version":"1.0","instance_type":"virtual-machine","location":"host1","auth":"untrusted","supported_storage_drivers":[]}`)},
		{"info ready", b, "GET", "/1.0", "", sync200(`{"state":"Ready","api_version":"1.0","instance_type":"virtual-machine","location":"host1","auth":"untrusted","supported_storage_drivers":[]}`)},
		{"config list", a, "GET", "/1.0/config", "", sync200(`["/1.0/config/cloud-init.user-data","/1.0/config/user.foo","/1.0/config/user.meta-data","/1.0/config/cloud-init.vendor-data","/1.0/config/user.vendor-data"]`)},
		{"config list without ssh keys", b, "GET", "/1.0/config", "", sync200(`["/1.0/config/cloud-init.user-data","/1.0/config/user.foo"]`)},
		{"config key", a, "GET", "/1.0/config/user.foo", "", sync200(`"bar"`)},
		{"config key raw kept", b, "GET", "/1.0/config/cloud-init.user-data", "", sync200(`"#cloud-config\npackages: [curl]\nruncmd: [\"printf '%s\\n' hi\"]\n"`)},
		{"user-data with ssh keys merged", a, "GET", "/1.0/config/cloud-init.user-data", "", sync200(`"#cloud-config\npackages:\n- curl\nruncmd:\n- |-\n  printf '%s\n  ' hi\nusers:\n- name: root\n  ssh-authorized-keys:\n  - ssh-ed25519 AAAA #lxd:cloud-init.ssh-keys\n  ssh_authorized_keys:\n  - ssh-ed25519 AAAA #lxd:cloud-init.ssh-keys\n"`)},
		{"vendor-data unset with ssh keys", a, "GET", "/1.0/config/cloud-init.vendor-data", "", sync200(`"#cloud-config\nusers:\n- name: root\n  ssh-authorized-keys:\n  - ssh-ed25519 AAAA #lxd:cloud-init.ssh-keys\n  ssh_authorized_keys:\n  - ssh-ed25519 AAAA #lxd:cloud-init.ssh-keys\n"`)},
		{"vendor-data unset", b, "GET", "/1.0/config/cloud-init.vendor-data", "", sync200(`"#cloud-config\n{}\n"`)},
		{"old user-data unset", b, "GET", "/1.0/config/user.user-data", "", sync200(`"#cloud-config\n{}\n"`)},
		{"config key escaped", a, "GET", "/1.0/config/user%2efoo", "", sync200(`"bar"`)},
		{"config key other instance", b, "GET", "/1.0/config/user.foo", "", sync200(`"b-secret"`)},
		{"config key unset", a, "GET", "/1.0/config/user.nope", "", fail(404, "Not Found")},
		{"config key empty", a, "GET", "/1.0/config/user.empty", "", fail(404, "Not Found")},
		{"config key forbidden set", a, "GET", "/1.0/config/security.secureboot", "", fail(403, "Forbidden")},
		{"config key forbidden unset", a, "GET", "/1.0/config/limits.cpu", "", fail(403, "Forbidden")},
		{"config key volatile", a, "GET", "/1.0/config/volatile.cloud-init.instance-id", "", fail(403, "Forbidden")},
		{"config key no key", a, "GET", "/1.0/config/", "", fail(404, "Not Found")},
		{"meta-data", a, "GET", "/1.0/meta-data", "", sync200(`"instance-id: iid-a\nlocal-hostname: a\nfoo: bar\n"`)},
		{"meta-data uuid", b, "GET", "/1.0/meta-data", "", sync200(`"instance-id: ` + uuidB + `\nlocal-hostname: b\n"`)},
		{"devices", a, "GET", "/1.0/devices", "", sync200(`{"eth0":{"hwaddr":"` + mac0 + `","network":"br0","type":"nic"},"eth1":{"hwaddr":"00:16:3e:aa:bb:cc","network":"br0","type":"nic"},"eth2":{"hwaddr":"00:16:3e:12:34:56","network":"br0","type":"nic"},"root":{"path":"/","pool":"default","type":"disk"}}`)},
		{"devices none", b, "GET", "/1.0/devices", "", sync200(`{}`)},
		{"config none", e.client(uuidOld, nil), "GET", "/1.0", "", fail(401, "Unauthorized")},
		{"unknown path", a, "GET", "/1.0/nope", "", fail(404, "Not Found")},
		{"trailing slash", a, "GET", "/1.0/", "", fail(404, "Not Found")},
		{"other version", a, "GET", "/2.0", "", fail(404, "Not Found")},
		{"method not implemented", a, "POST", "/1.0", "{}", fail(501, "Not Implemented")},
		{"head", a, "HEAD", "/1.0", "", answer{501, "application/json", ""}},
		{"options", a, "OPTIONS", "/1.0", "", fail(404, `Method "OPTIONS" not found`)},
		{"post events", a, "POST", "/1.0/events", "", fail(501, "Not Implemented")},
		{"ubuntu-pro", a, "GET", "/1.0/ubuntu-pro", "", sync200(`{"guest_attach":"off"}`)},
		{"ubuntu-pro token", a, "POST", "/1.0/ubuntu-pro/token", "", fail(403, "Failed getting an Ubuntu Pro guest token: Guest attachment not allowed")},
		{"ubuntu-pro token get", a, "GET", "/1.0/ubuntu-pro/token", "", fail(501, "Not Implemented")},
		{"put config", a, "PUT", "/1.0/config/user.foo", "x", fail(501, "Not Implemented")},
		{"delete root", a, "DELETE", "/", "", fail(501, "Not Implemented")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(t, tt.c, tt.method, tt.path, tt.body); got != tt.want {
				t.Fatalf("%s %s:\n got %d %q %q\nwant %d %q %q", tt.method, tt.path, got.status, got.ctype, got.body, tt.want.status, tt.want.ctype, tt.want.body)
			}
		})
	}
}

func TestCertificates(t *testing.T) {
	e := newEnv(t, nil)
	now := time.Now()
	stranger, err := pki.GeneratePair("a", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		uuid   string
		client *pki.Pair
		want   int
	}{
		{"own certificate", uuidA, e.agents["a"], 200},
		{"no certificate", uuidA, nil, 401},
		{"wrong certificate same name", uuidA, stranger, 401},
		{"another instance's certificate", uuidA, e.agents["b"], 401},
		{"expired certificate", uuidOld, e.agents["old"], 401},
		{"instance unknown", uuidGone, e.agents["a"], 401},
		{"daemon's own certificate", uuidA, e.daemon, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.client(tt.uuid, tt.client)
			for _, req := range []struct{ method, path, body string }{
				{"GET", "/1.0", ""}, {"GET", "/1.0/config/user.foo", ""}, {"PATCH", "/1.0", `{"state":"Ready"}`}, {"GET", "/nope", ""},
			} {
				got := do(t, c, req.method, req.path, req.body)
				if tt.want == 401 {
					if got != fail(401, "Unauthorized") {
						t.Fatalf("%s %s: %+v, want 401 Unauthorized", req.method, req.path, got)
					}
				} else if req.path != "/nope" && got.status != tt.want {
					t.Fatalf("%s %s: %+v, want %d", req.method, req.path, got, tt.want)
				}
			}
		})
	}
	for _, c := range e.insts.readyCalls() {
		if c.uuid != uuidA {
			t.Fatalf("a rejected caller changed instance %s", c.uuid)
		}
	}
}

func TestNotYetValidCertificate(t *testing.T) {
	later := time.Now().Add(-2 * time.Hour) // the server's clock runs behind
	e := newEnv(t, func(c *Config) { c.Now = func() time.Time { return later } })
	if got := do(t, e.client(uuidA, e.agents["a"]), "GET", "/1.0", ""); got != fail(401, "Unauthorized") {
		t.Fatalf("got %+v, want 401", got)
	}
}

func TestPatchState(t *testing.T) {
	e := newEnv(t, nil)
	a := e.client(uuidA, e.agents["a"])
	tests := []struct {
		name      string
		body      string
		want      answer
		wantReady *bool
	}{
		{"ready", `{"state":"Ready"}`, sync200("null"), ptr(true)},
		{"ready again", `{"state":"Ready"}`, sync200("null"), ptr(true)},
		{"started", `{"state":"Started"}`, sync200("null"), ptr(false)},
		{"ready extra field", `{"state":"Ready","x":1}`, sync200("null"), ptr(true)},
		{"lower case", `{"state":"ready"}`, fail(400, `Invalid state "ready"`), nil},
		{"running", `{"state":"Running"}`, fail(400, `Invalid state "Running"`), nil},
		{"garbage state", `{"state":"\u00ff\u0001"}`, fail(400, "Invalid state \"\u00ff\\x01\""), nil},
		{"no state", `{}`, fail(400, `Invalid state ""`), nil},
		{"empty body", ``, fail(400, `Invalid request body: EOF`), nil},
		{"truncated", `{"state":`, fail(400, `Invalid request body: unexpected EOF`), nil},
		{"not json", `state=Ready`, fail(400, `Invalid request body: invalid character 's' looking for beginning of value`), nil},
		{"wrong type", `{"state":1}`, fail(400, `Invalid request body: json: cannot unmarshal number into Go struct field StatePut.state of type string`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.insts.readyCalls())
			got := do(t, a, "PATCH", "/1.0", tt.body)
			if got != tt.want {
				t.Fatalf("got %d %q %q\nwant %d %q %q", got.status, got.ctype, got.body, tt.want.status, tt.want.ctype, tt.want.body)
			}
			calls := e.insts.readyCalls()[before:]
			if tt.wantReady == nil {
				if len(calls) != 0 {
					t.Fatalf("SetReady called %d times for a rejected body", len(calls))
				}
				return
			}
			if len(calls) != 1 || calls[0].uuid != uuidA || calls[0].ready != *tt.wantReady || calls[0].by.Protocol != "devlxd" {
				t.Fatalf("SetReady calls %+v, want one for %s ready=%v by devlxd", calls, uuidA, *tt.wantReady)
			}
			state := "Started"
			if *tt.wantReady {
				state = "Ready"
			}
			if info := do(t, a, "GET", "/1.0", ""); !strings.Contains(info.body, `"state":"`+state+`"`) {
				t.Fatalf("GET /1.0 after PATCH: %s, want state %s", info.body, state)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPatchStateRateLimit checks that an instance sending state changes
// faster than the limit is answered 429 without them being recorded, and
// that other instances keep their own allowance.
func TestPatchStateRateLimit(t *testing.T) {
	const burst = 3
	// Practically no refill within the test: one token per 1,000 s.
	e := newEnv(t, func(c *Config) { c.StateRate, c.StateBurst = 0.001, burst })
	a := e.client(uuidA, e.agents["a"])
	b := e.client(uuidB, e.agents["b"])
	for i := range burst {
		if got := do(t, a, "PATCH", "/1.0", `{"state":"Ready"}`); got != sync200("null") {
			t.Fatalf("PATCH %d within the burst: %d %q", i+1, got.status, got.body)
		}
	}
	before := len(e.insts.readyCalls())
	for _, body := range []string{`{"state":"Ready"}`, `{"state":"Started"}`, `garbage`} {
		if got, want := do(t, a, "PATCH", "/1.0", body), fail(429, "Too Many Requests"); got != want {
			t.Fatalf("PATCH %s over the limit: %d %q, want %d %q", body, got.status, got.body, want.status, want.body)
		}
	}
	if n := len(e.insts.readyCalls()) - before; n != 0 {
		t.Fatalf("SetReady called %d times over the limit", n)
	}
	if got := do(t, a, "GET", "/1.0", ""); got.status != 200 {
		t.Fatalf("GET /1.0 over the PATCH limit: %d %q", got.status, got.body)
	}
	if got := do(t, b, "PATCH", "/1.0", `{"state":"Ready"}`); got != sync200("null") {
		t.Fatalf("another instance's PATCH: %d %q", got.status, got.body)
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BodyLimit = 1024 })
	a := e.client(uuidA, e.agents["a"])
	big := `{"state":"Ready","pad":"` + strings.Repeat("x", 4096) + `"}`
	if got := do(t, a, "PATCH", "/1.0", big); got != fail(413, "Request Entity Too Large") {
		t.Fatalf("got %+v, want 413", got)
	}
	// A huge announced body is refused before it is read.
	raw, err := net.Dial("unix", e.socks[uuidA])
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, e.tlsConfig(e.agents["a"]))
	defer tc.Close()
	if _, err := io.WriteString(tc, "PATCH /1.0 HTTP/1.1\r\nHost: lxd\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"state\":"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := (answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(body)}); got != fail(413, "Request Entity Too Large") {
		t.Fatalf("1 GiB announced: %+v, want 413", got)
	}
	if n := len(e.insts.readyCalls()); n != 0 {
		t.Fatalf("an oversized body changed the ready state (%d calls)", n)
	}
	if got := do(t, e.client(uuidA, e.agents["a"]), "PATCH", "/1.0", `{"state":"Ready"}`); got != sync200("null") {
		t.Fatalf("normal PATCH after oversized ones: %+v", got)
	}
}

func TestDevlxdDisabledLive(t *testing.T) {
	e := newEnv(t, nil)
	off := e.client(uuidOff, e.agents["off"])
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/", ""}, {"GET", "/1.0", ""}, {"PATCH", "/1.0", `{"state":"Ready"}`}, {"GET", "/1.0/config", ""},
		{"GET", "/1.0/config/user.foo", ""}, {"GET", "/1.0/meta-data", ""}, {"GET", "/1.0/devices", ""}, {"GET", "/nope", ""},
	} {
		t.Run(req.method+" "+req.path, func(t *testing.T) {
			if got := do(t, off, req.method, req.path, req.body); got != fail(403, "Forbidden") {
				t.Fatalf("got %+v, want 403 Forbidden", got)
			}
		})
	}
	if n := len(e.insts.readyCalls()); n != 0 {
		t.Fatalf("PATCH on a devlxd-disabled instance reached SetReady")
	}
	// Changes apply to the next request on the same kept-alive connection.
	a := e.client(uuidA, e.agents["a"])
	t.Run("toggle", func(t *testing.T) {
		if got := do(t, a, "GET", "/1.0/config/user.foo", ""); got.status != 200 {
			t.Fatalf("before: %+v", got)
		}
		e.insts.setConfig(uuidA, "security.devlxd", "false")
		if got := do(t, a, "GET", "/1.0/config/user.foo", ""); got != fail(403, "Forbidden") {
			t.Fatalf("disabled: %+v", got)
		}
		e.insts.setConfig(uuidA, "security.devlxd", "true")
		if got := do(t, a, "GET", "/1.0/config/user.foo", ""); got.status != 200 {
			t.Fatalf("enabled again: %+v", got)
		}
	})
}

// TestSlowClients checks that connections which never send a TLS hello or a
// complete request are closed after the read-header timeout, while other
// clients are served meanwhile.
func TestSlowClients(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReadHeaderTimeout = 300 * time.Millisecond })
	path := e.socks[uuidA]
	tests := []struct {
		name string
		send func(t *testing.T, c net.Conn) net.Conn
	}{
		{"silent before TLS", func(t *testing.T, c net.Conn) net.Conn { return c }},
		{"partial header", func(t *testing.T, c net.Conn) net.Conn {
			tc := tls.Client(c, e.tlsConfig(e.agents["a"]))
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(tc, "GET /1.0 HTTP/1.1\r\nHost: lxd\r\n"); err != nil {
				t.Fatal(err)
			}
			return tc
		}},
		{"body never sent", func(t *testing.T, c net.Conn) net.Conn {
			tc := tls.Client(c, e.tlsConfig(e.agents["a"]))
			if _, err := io.WriteString(tc, "PATCH /1.0 HTTP/1.1\r\nHost: lxd\r\nContent-Length: 100\r\n\r\n{"); err != nil {
				t.Fatal(err)
			}
			return tc
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			c := tt.send(t, raw)
			// Meanwhile another client is served.
			if got := do(t, e.client(uuidA, e.agents["a"]), "GET", "/1.0", ""); got.status != 200 {
				t.Fatalf("other client: %+v", got)
			}
			if err := raw.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept a slow connection open")
			}
		})
	}
}

// TestConcurrentConnections keeps 1,000 TLS connections of one instance open
// at once and sends a request on every one of them at the same time.
func TestConcurrentConnections(t *testing.T) {
	// Handshakes queue on 2 loaded cores: the timeouts are tested elsewhere.
	e := newEnv(t, func(c *Config) { c.ReadHeaderTimeout = time.Minute; c.IdleTimeout = 5 * time.Minute })
	const n = 1000
	path := e.socks[uuidA]
	cfg := e.tlsConfig(e.agents["a"])
	conns := make([]*tls.Conn, n)
	readers := make([]*bufio.Reader, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	get := func(i int) error {
		c := conns[i]
		if err := c.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
			return err
		}
		if _, err := io.WriteString(c, "GET /1.0 HTTP/1.1\r\nHost: lxd\r\n\r\n"); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		resp, err := http.ReadResponse(readers[i], nil)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"state":"Started"`)) {
			return fmt.Errorf("connection %d: %d %q %v", i, resp.StatusCode, body, err)
		}
		return nil
	}
	run := func(parallel int, f func(i int) error) {
		t.Helper()
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := f(i); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// Open the connections (the handshakes a few at a time), each with a
	// first request, and keep them all open.
	run(16, func(i int) error {
		raw, err := net.Dial("unix", path)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns[i] = tls.Client(raw, cfg)
		readers[i] = bufio.NewReader(conns[i])
		return get(i)
	})
	// Then a request on every open connection at once.
	run(n, get)
}

// TestServeListener checks Serve with a listener whose connections carry
// their identity, as linkhost.Host hands them on.
func TestServeListener(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(t.TempDir(), "l.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.srv.Serve(identListener{ln, linkhost.Identity{InstanceUUID: uuidB, Link: sdk.LinkVsock}})
	}()
	e.socks["serve"] = path
	if got := do(t, e.client("serve", e.agents["b"]), "GET", "/1.0/config/user.foo", ""); got != sync200(`"b-secret"`) {
		t.Fatalf("got %+v", got)
	}
	if got := do(t, e.client("serve", e.agents["a"]), "GET", "/1.0", ""); got.status != 401 {
		t.Fatalf("a's certificate on b's link: %+v", got)
	}
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its listener closed")
	}
}

type identListener struct {
	net.Listener
	id linkhost.Identity
}

func (l identListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return linkhost.WithIdentity(c, l.id), nil
}

func TestConnWithoutIdentity(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(t.TempDir(), "l.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go e.srv.Serve(ln) //nolint:errcheck // ends when ln closes
	e.socks["bare"] = path
	if got := do(t, e.client("bare", e.agents["a"]), "GET", "/1.0", ""); got != fail(401, "Unauthorized") {
		t.Fatalf("got %+v", got)
	}
}

func TestShutdownRefusesConnections(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := e.srv.ServeConn(a, linkhost.Identity{InstanceUUID: uuidA}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ServeConn after Shutdown: %v, want net.ErrClosed", err)
	}
}

// TestUnknownMethod checks methods LXD does not route: 404 `Method "X"
// not found`. (Methods fiber does not know at all, e.g. PROPFIND, get its
// 400 "Invalid http method"; the agent answers those itself and never
// forwards them.)
func TestUnknownMethod(t *testing.T) {
	e := newEnv(t, nil)
	a := e.client(uuidA, e.agents["a"])
	for _, m := range []string{"OPTIONS", "TRACE", "CONNECT"} {
		t.Run(m, func(t *testing.T) {
			if got, want := do(t, a, m, "/1.0", ""), fail(404, `Method "`+m+`" not found`); got != want {
				t.Fatalf("%s /1.0 = %+v, want %+v", m, got, want)
			}
		})
	}
}
