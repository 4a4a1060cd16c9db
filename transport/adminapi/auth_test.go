package adminapi_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testcert"

	"github.com/gorilla/websocket"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// routes is every route of the admin API, with a body where it takes one.
var routes = []struct{ method, path, body string }{
	{"GET", "/1.0", ""},
	{"GET", "/1.0/instances", ""},
	{"POST", "/1.0/instances", `{"name":"x1","backend":"sim","config":{"sim.command":"id"}}`},
	{"GET", "/1.0/instances/web1", ""},
	{"PATCH", "/1.0/instances/web1", `{"config":{"user.a":"1"}}`},
	{"DELETE", "/1.0/instances/web1?force=1", ""},
	{"GET", "/1.0/instances/web1/state", ""},
	{"PUT", "/1.0/instances/web1/state", `{"action":"stop","force":true}`},
	{"GET", "/1.0/instances/web1/timeline", ""},
	{"GET", "/1.0/instances/web1/console?follow=true", ""},
	{"GET", "/1.0/backends", ""},
	{"POST", "/1.0/backends", `{"path":"/bin/true","name":"evil"}`},
	{"POST", "/1.0/backends/sim/reload", ""},
	{"GET", "/1.0/events", ""},
	{"GET", "/1.0/certificates", ""},
	{"POST", "/1.0/certificates", `{"certificate":"x"}`},
	{"GET", "/1.0/certificates/" + strings.Repeat("a", 64), ""},
	{"DELETE", "/1.0/certificates/" + strings.Repeat("a", 64), ""},
	{"GET", "/1.0/auth/identities", ""},
	{"POST", "/1.0/auth/identities/bearer", `{"name":"evil"}`},
	{"DELETE", "/1.0/auth/identities/bearer/ci", ""},
	{"POST", "/1.0/auth/identities/bearer/ci/token", `{}`},
	{"DELETE", "/1.0/auth/identities/bearer/ci/token", ""},
	{"POST", "/1.0/auth/dashboard-logins", ""},
	{"GET", "/1.0/auth/sessions", ""},
	{"DELETE", "/1.0/auth/sessions/abcdef12", ""},
	{"GET", "/1.0/no-such-route", ""},
	{"GET", "/metrics", ""},
}

// keyPair returns a self-signed certificate for client or server use.
func keyPair(t *testing.T, cn string) (tls.Certificate, []byte) {
	t.Helper()
	p := testcert.New(t, cn)
	return p.TLS(), p.CertPEM
}

// authServer is an API with authentication on a plain and a TLS loopback
// listener, plus a fake clock.
type authServer struct {
	*apitest.Server
	httpAddr, httpsAddr string
	mu                  sync.Mutex
	now                 time.Time
}

func (a *authServer) clock() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.now }
func (a *authServer) advance(d time.Duration) {
	a.mu.Lock()
	a.now = a.now.Add(d)
	a.mu.Unlock()
}

func newAuthServer(t *testing.T) *authServer {
	t.Helper()
	as := &authServer{now: time.Now()}
	as.Server = apitest.NewServer(t, apitest.Options{Auth: true, AuthNow: as.clock, DashboardURL: "http://127.0.0.1:8080",
		Metrics: metricsStub})
	as.httpAddr = as.ServeTCP(t)
	serverCert, _ := keyPair(t, "server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12})
	go func() { _ = as.API.Serve(tln) }()
	as.httpsAddr = ln.Addr().String()
	return as
}

// tcpCall sends one request over TCP (https when cert is not nil or tlsOn)
// and returns the status and the envelope.
func tcpCall(t *testing.T, base string, cert *tls.Certificate, hdr map[string]string, method, path, body string) (int, envelope) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	defer tr.CloseIdleConnections()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: %d answer is not an envelope: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, env
}

// TestUnauthenticatedTCP checks that on TCP every /1.0 route refuses a
// request without valid credentials with 401 in the error envelope, and
// that nothing changed.
func TestUnauthenticatedTCP(t *testing.T) {
	as := newAuthServer(t)
	ctx := context.Background()
	if _, err := as.Auth.CreateIdentity(ctx, "ci", "test", ""); err != nil {
		t.Fatal(err)
	}
	revoked, _, _ := as.Auth.IssueToken(ctx, "ci", 0)
	if err := as.Auth.RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := as.Auth.CreateIdentity(ctx, "short", "test", ""); err != nil {
		t.Fatal(err)
	}
	expired, _, _ := as.Auth.IssueToken(ctx, "short", time.Minute)
	as.advance(2 * time.Minute)
	untrusted, _ := keyPair(t, "mallory")

	plain := "http://" + as.httpAddr
	secure := "https://" + as.httpsAddr
	for _, cred := range []struct {
		name string
		base string
		cert *tls.Certificate
		hdr  map[string]string
	}{
		{"http no credentials", plain, nil, nil},
		{"https no credentials", secure, nil, nil},
		{"wrong token", plain, nil, map[string]string{"Authorization": "Bearer glb_" + strings.Repeat("x", 43)}},
		{"malformed token", secure, nil, map[string]string{"Authorization": "Bearer nope"}},
		{"basic auth", plain, nil, map[string]string{"Authorization": "Basic YWRtaW46YWRtaW4="}},
		{"expired token", plain, nil, map[string]string{"Authorization": "Bearer " + expired}},
		{"revoked token", secure, nil, map[string]string{"Authorization": "Bearer " + revoked}},
		{"untrusted certificate", secure, &untrusted, nil},
		{"spoofed proxy headers", plain, nil, map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https", "X-Real-Ip": "127.0.0.1"}},
	} {
		t.Run(cred.name, func(t *testing.T) {
			for _, r := range routes {
				code, env := tcpCall(t, cred.base, cred.cert, cred.hdr, r.method, r.path, r.body)
				if code != 401 {
					t.Errorf("%s %s: %d %q, want 401", r.method, r.path, code, env.Error)
					continue
				}
				checkEnvelope(t, code, env)
			}
		})
	}
	list, err := as.Instances.List(ctx, instance.ListFilter{})
	if err != nil || len(list) != 0 {
		t.Fatalf("instances after refused requests: %d, %v", len(list), err)
	}
	ids, _ := as.Auth.Identities(ctx)
	if len(ids) != 2 {
		t.Fatalf("identities after refused requests: %+v", ids)
	}
}

// TestAuthenticatedTCP checks the two ways in and who the changes name.
func TestAuthenticatedTCP(t *testing.T) {
	as := newAuthServer(t)
	cert, certPEM := keyPair(t, "alice")
	token := as.BearerToken(t, "ci")

	// Trust the certificate through the API, over the bearer token.
	bearer := map[string]string{"Authorization": "Bearer " + token}
	body, _ := json.Marshal(api.CertificatesPost{Name: "alice", Certificate: string(certPEM)})
	code, env := tcpCall(t, "http://"+as.httpAddr, nil, bearer, "POST", "/1.0/certificates", string(body))
	if code != 201 {
		t.Fatalf("POST /1.0/certificates: %d %s", code, env.Error)
	}
	code, env = tcpCall(t, "https://"+as.httpsAddr, &cert, nil, "POST", "/1.0/instances", `{"name":"c1","backend":"sim"}`)
	if code != 201 {
		t.Fatalf("create over a trusted certificate: %d %s", code, env.Error)
	}
	by := as.Instances.LastRequestor()
	if by.Protocol != "tls" || by.Username != "alice" || by.Fingerprint != auth.Fingerprint(cert.Leaf) || by.Address == "" {
		t.Fatalf("requestor over tls = %+v", by)
	}
	code, env = tcpCall(t, "https://"+as.httpsAddr, nil, bearer, "POST", "/1.0/instances", `{"name":"c2","backend":"sim"}`)
	if code != 201 {
		t.Fatalf("create over a bearer token (https): %d %s", code, env.Error)
	}
	if by := as.Instances.LastRequestor(); by.Protocol != "bearer" || by.Username != "bearer/ci" {
		t.Fatalf("requestor over bearer = %+v", by)
	}
	if got := by.APICause(); got != "api: tls alice "+auth.Fingerprint(cert.Leaf)[:16] {
		t.Fatalf("timeline cause = %q", got)
	}

	// The dashboard login URL.
	code, env = tcpCall(t, "http://"+as.httpAddr, nil, bearer, "POST", "/1.0/auth/dashboard-logins", "")
	var login api.DashboardLogin
	if code != 201 || json.Unmarshal(env.Metadata, &login) != nil || !strings.HasPrefix(login.URL, "http://127.0.0.1:8080/login?token=gll_") {
		t.Fatalf("dashboard login: %d %s %+v", code, env.Error, login)
	}
}

// TestAuthRoutesValidate checks the precise answers of the new routes.
func TestAuthRoutesValidate(t *testing.T) {
	as := newAuthServer(t)
	_, certPEM := keyPair(t, "alice")
	certJSON, _ := json.Marshal(api.CertificatesPost{Certificate: string(certPEM)})
	for _, tt := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"POST", "/1.0/auth/identities/bearer", `{"name":"ci"}`, 201, ""},
		{"POST", "/1.0/auth/identities/bearer", `{"name":"ci"}`, 409, "already exists"},
		{"POST", "/1.0/auth/identities/bearer", `{"name":"1ci"}`, 400, "must not start with a digit"},
		{"POST", "/1.0/auth/identities/bearer", `{"name":""}`, 400, "empty"},
		{"POST", "/1.0/auth/identities/bearer", `{"nom":"x"}`, 400, "unknown field"},
		{"POST", "/1.0/auth/identities/bearer/ci/token", `{"expiry":"forever"}`, 400, "invalid expiry"},
		{"POST", "/1.0/auth/identities/bearer/ci/token", `{"expiry":"10s"}`, 400, "at least 1m"},
		{"POST", "/1.0/auth/identities/bearer/nobody/token", `{}`, 404, "not found"},
		{"POST", "/1.0/auth/identities/bearer/ci/token", `{"expiry":"24h"}`, 201, ""},
		{"POST", "/1.0/auth/identities/bearer/ci/token", "", 201, ""},
		{"DELETE", "/1.0/auth/identities/bearer/ci/token", "", 200, ""},
		{"DELETE", "/1.0/auth/identities/bearer/bad%2Fname", "", 400, "invalid name"},
		{"DELETE", "/1.0/auth/identities/bearer/nobody", "", 404, "not found"},
		{"DELETE", "/1.0/auth/identities/bearer/ci", "", 200, ""},
		{"POST", "/1.0/certificates", `{"certificate":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"}`, 400, "invalid certificate"},
		{"POST", "/1.0/certificates", `{"certificate":""}`, 400, "empty"},
		{"POST", "/1.0/certificates", `{"certificate":"x","type":"server"}`, 400, "only client certificates"},
		{"POST", "/1.0/certificates", string(certJSON), 201, ""},
		{"POST", "/1.0/certificates", string(certJSON), 409, "already trusted"},
		{"GET", "/1.0/certificates/abc", "", 400, "invalid fingerprint"},
		{"GET", "/1.0/certificates/" + strings.Repeat("0", 64), "", 404, "not found"},
		{"DELETE", "/1.0/certificates/" + strings.Repeat("0", 64), "", 404, "not found"},
		{"DELETE", "/1.0/auth/sessions/abc", "", 400, "at least 8"},
		{"DELETE", "/1.0/auth/sessions/abcdef12", "", 404, "not found"},
		{"POST", "/1.0/auth/dashboard-logins", `{"x":1}`, 400, "unknown field"},
	} {
		t.Run(tt.method+" "+tt.path+" "+tt.body, func(t *testing.T) {
			code, env := call(t, as.Server, tt.method, tt.path, tt.body)
			if code != tt.code || !strings.Contains(env.Error, tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", code, env.Error, tt.code, tt.msg)
			}
			checkEnvelope(t, code, env)
		})
	}
	// Identities never show tokens.
	code, env := call(t, as.Server, "POST", "/1.0/auth/identities/bearer", `{"name":"ci2"}`)
	if code != 201 {
		t.Fatal(env.Error)
	}
	_, env = call(t, as.Server, "POST", "/1.0/auth/identities/bearer/ci2/token", "")
	var tok api.Token
	if err := json.Unmarshal(env.Metadata, &tok); err != nil || tok.Token == "" {
		t.Fatalf("token answer %s", env.Metadata)
	}
	_, env = call(t, as.Server, "GET", "/1.0/auth/identities", "")
	if strings.Contains(string(env.Metadata), tok.Token) || !strings.Contains(string(env.Metadata), `"has_token":true`) {
		t.Fatalf("identities = %s", env.Metadata)
	}
}

// TestForwardedHeadersIgnored checks that X-Forwarded-Host can bypass
// neither the Host check nor the events websocket's origin check.
func TestForwardedHeadersIgnored(t *testing.T) {
	as := newAuthServer(t)
	token := as.BearerToken(t, "ci")
	port := as.httpAddr[strings.LastIndex(as.httpAddr, ":")+1:]
	ws := map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-Websocket-Version": "13",
		"Sec-Websocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Authorization": "Bearer " + token,
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tt := range []struct {
		name string
		host string
		hdr  map[string]string
		code int
		msg  string
	}{
		{"cross-origin websocket with a matching X-Forwarded-Host", "127.0.0.1:" + port,
			with(ws, "Origin", "http://evil.example", "X-Forwarded-Host", "evil.example"), 403, "cross-origin"},
		{"rebound Host with a local X-Forwarded-Host", "evil.example",
			with(ws, "X-Forwarded-Host", "127.0.0.1:"+port), 403, "not accepted"},
		{"rebound Host on a plain request", "evil.example:" + port,
			map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-Host": "localhost"}, 403, "not accepted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+as.httpAddr+"/1.0/events", nil)
			req.Host = tt.host
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env envelope
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &env); err != nil {
				t.Fatalf("%d answer is not an envelope: %s", resp.StatusCode, raw)
			}
			if resp.StatusCode != tt.code || !strings.Contains(env.Error, tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, env.Error, tt.code, tt.msg)
			}
		})
	}
	// A configured name is accepted (then authentication decides).
	as2 := apitest.NewServer(t, apitest.Options{Auth: true, Hosts: []string{"guestlink.example"}})
	addr := as2.ServeTCP(t)
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/1.0", addr), nil)
	req.Host = "guestlink.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("configured host: %d, want 401 (past the Host check)", resp.StatusCode)
	}
}

// TestRevokedStreamEnds checks that an events websocket opened with a
// token or a certificate ends (close 1008) at the next ping once its
// credentials are revoked, while one opened on the socket goes on.
func TestRevokedStreamEnds(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{Auth: true, PingInterval: 50 * time.Millisecond})
	addr := srv.ServeTCP(t)
	token := srv.BearerToken(t, "ci")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.NewWithOptions("http://"+addr, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local, err := client.New(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	evc, errc := c.Events(ctx, client.EventFilter{})
	levc, lerrc := local.Events(ctx, client.EventFilter{})
	if _, err := local.Create(ctx, api.InstancesPost{Name: "r1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan api.Event{evc, levc} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("no event before the revocation")
		}
	}
	if err := srv.Auth.RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	for range evc {
	}
	err = <-errc
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "revoked") {
		t.Fatalf("stream after revocation ended with %v, want close 1008", err)
	}
	// The socket's stream is not affected.
	if _, err := local.UpdateConfig(ctx, "r1", map[string]string{"user.a": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-levc:
		if !ok {
			t.Fatalf("socket stream ended: %v", <-lerrc)
		}
		_ = ev
	case <-ctx.Done():
		t.Fatal("socket stream stalled")
	}
}
