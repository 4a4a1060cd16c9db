package web

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
)

// wantSecurityHeaders checks the headers every dashboard answer carries.
func wantSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "script-src 'self'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", what, csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("%s: Content-Security-Policy %q allows inline code", what, csp)
	}
	for k, v := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second), stopped("bad", "sim"))
	inst.failing["bad"] = errBoom
	app, fs := newAuthApp(t, inst)
	s := signIn(t, app, fs)
	open, _ := newTestApp(inst, newBusEvents(), Config{})

	tests := []struct {
		name   string
		app    *fiber.App
		req    *http.Request
		status int
	}{
		{"overview", app, browserReq("GET", "/", s.sid, nil), 200},
		{"instances", app, browserReq("GET", "/instances", s.sid, nil), 200},
		{"instance page", app, browserReq("GET", "/instances/web1", s.sid, nil), 200},
		{"unknown instance", app, browserReq("GET", "/instances/nope", s.sid, nil), 404},
		{"bad filter", app, browserReq("GET", "/instances?status=Bogus", s.sid, nil), 400},
		{"action", app, browserReq("POST", "/instances/web1/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"start"}}), 200},
		{"failed action", app, browserReq("POST", "/instances/bad/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"start"}}), 422},
		{"bulk action", app, browserReq("POST", "/instances/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"start"}, "names": {"web1"}}), 200},
		{"action without token", app, browserReq("POST", "/instances/web1/actions", s.sid, url.Values{"action": {"start"}}), 403},
		{"launch form", app, browserReq("GET", "/launch", s.sid, nil), 200},
		{"launch refused", app, browserReq("POST", "/launch", s.sid, url.Values{"_csrf": {s.token}, "name": {"-bad"}, "backend": {"sim"}}), 422},
		{"launch without token", app, browserReq("POST", "/launch", s.sid, url.Values{"name": {"ok1"}, "backend": {"sim"}}), 403},
		{"delete confirmation", app, browserReq("GET", "/instances/web1/delete", s.sid, nil), 200},
		{"config refused", app, browserReq("POST", "/instances/web1/config", s.sid, url.Values{"_csrf": {s.token}}), 422},
		{"boot chart", app, browserReq("GET", "/instances/web1/bootchart", s.sid, nil), 200},
		{"console download", app, browserReq("GET", "/instances/web1/console.log", s.sid, nil), 200},
		{"console of an unknown instance", app, browserReq("GET", "/instances/nope/console.log", s.sid, nil), 404},
		{"htmx without session", app, func() *http.Request {
			r := browserReq("GET", "/instances", "", nil)
			r.Header.Set("HX-Request", "true")
			return r
		}(), 401},
		{"login page", app, browserReq("GET", "/login", "", nil), 401},
		{"bad login token", app, browserReq("GET", "/login?token=bad", "", nil), 401},
		{"good login token", app, browserReq("GET", "/login?token="+fs.issue(), "", nil), 303},
		{"page without session", app, browserReq("GET", "/instances/web1", "", nil), 401},
		{"stream without session", app, browserReq("GET", "/events", "", nil), 401},
		{"stream with a bad resume id", app, browserReq("GET", "/events?since=x", s.sid, nil), 400},
		{"asset css", app, browserReq("GET", "/assets/app.css", "", nil), 200},
		{"asset htmx", app, browserReq("GET", "/assets/htmx.min.js", "", nil), 200},
		{"asset live.js", app, browserReq("GET", "/assets/live.js", "", nil), 200},
		{"asset console.js", app, browserReq("GET", "/assets/console.js", "", nil), 200},
		{"logout", app, browserReq("POST", "/logout", signIn(t, app, fs).sid, url.Values{}), 403},
		{"no login: overview", open, browserReq("GET", "/", "", nil), 200},
		{"no login: unknown instance", open, browserReq("GET", "/instances/nope", "", nil), 404},
		{"no login: action without token", open, browserReq("POST", "/instances/web1/actions", "", url.Values{"action": {"stop"}}), 403},
		{"no login: asset", open, browserReq("GET", "/assets/app.css", "", nil), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body, _ := do(t, tt.app, tt.req)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %.200s", res.StatusCode, tt.status, body)
			}
			wantSecurityHeaders(t, tt.name, res.Header)
		})
	}
	t.Run("live stream", func(t *testing.T) {
		fs := newFakeSessions()
		app, d := newTestApp(inst, newBusEvents(), Config{Sessions: fs})
		s := signIn(t, app, fs)
		base := server(t, app, d)
		c := openStream(t, base+"/events", map[string]string{"Cookie": sessionCookie + "=" + s.sid})
		defer c.cancel()
		wantSecurityHeaders(t, "live stream", c.res.Header)
	})
}

// TestProxyHeadersNotTrusted: X-Forwarded-* headers change nothing: not
// the origin checks, not the cookie's Secure flag, not the address the
// requestor is recorded with.
func TestProxyHeadersNotTrusted(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second))
	fs := newFakeSessions()
	app, d := newTestApp(inst, newBusEvents(), Config{Sessions: fs})
	s := signIn(t, app, fs)
	forged := map[string]string{"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9;host=evil.example;proto=https"}

	t.Run("action from the forwarded origin", func(t *testing.T) {
		req := browserReq("POST", "/instances/web1/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"stop"}})
		for k, v := range forged {
			req.Header.Set(k, v)
		}
		req.Header.Set("Origin", "https://evil.example")
		res, body, _ := do(t, app, req)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `origin "https://evil.example" refused`) {
			t.Errorf("%d %q, want 403 naming the origin", res.StatusCode, body)
		}
	})
	t.Run("live stream from the forwarded origin", func(t *testing.T) {
		req := browserReq("GET", "/events", s.sid, nil)
		for k, v := range forged {
			req.Header.Set(k, v)
		}
		req.Header.Set("Origin", "https://evil.example")
		res, body, _ := do(t, app, req)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "live stream") {
			t.Errorf("%d %q, want 403", res.StatusCode, body)
		}
	})
	t.Run("cookie not Secure over plain HTTP", func(t *testing.T) {
		req := browserReq("GET", "/login?token="+fs.issue(), "", nil)
		for k, v := range forged {
			req.Header.Set(k, v)
		}
		res, _, _ := do(t, app, req)
		if c := sessionCookieOf(res); c == nil || c.Secure {
			t.Errorf("cookie %v: X-Forwarded-Proto made it Secure (or none was set)", c)
		}
	})
	t.Run("requestor address is the peer", func(t *testing.T) {
		base := server(t, app, d)
		form := url.Values{"_csrf": {s.token}, "action": {"stop"}}
		req, _ := http.NewRequest("POST", base+"/instances/web1/actions", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: s.sid})
		for k, v := range forged {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		by := inst.requestors()
		if got := by[len(by)-1].Address; got != "127.0.0.1" {
			t.Errorf("requestor address %q, want the peer 127.0.0.1, never X-Forwarded-For", got)
		}
	})
}

// TestSecureCookieOverTLS: a login over TLS sets a Secure cookie.
func TestSecureCookieOverTLS(t *testing.T) {
	// Borrow httptest's self-signed certificate and its client.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	certs, client := ts.TLS.Certificates, ts.Client()
	ts.Close()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	fs := newFakeSessions()
	app, d := newTestApp(newFakeInstances(), newBusEvents(), Config{Sessions: fs})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(tls.NewListener(ln, &tls.Config{Certificates: certs})) }()
	t.Cleanup(func() {
		d.Close()
		_ = app.ShutdownWithTimeout(10 * time.Second)
		<-done
	})
	res, err := client.Get("https://" + ln.Addr().String() + "/login?token=" + fs.issue())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	c := sessionCookieOf(res)
	if res.StatusCode != http.StatusSeeOther || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("over TLS: %d, cookie %v; want 303 and a Secure, HttpOnly, Strict cookie", res.StatusCode, c)
	}
}

// TestStreamEndsWithSession: a live stream stops within a heartbeat once
// its session is revoked.
func TestStreamEndsWithSession(t *testing.T) {
	noLeaks(t)
	fs := newFakeSessions()
	ev := newBusEvents()
	app, d := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), ev, Config{Sessions: fs, Heartbeat: 20 * time.Millisecond})
	s := signIn(t, app, fs)
	base := server(t, app, d)
	c := openStream(t, base+"/events", map[string]string{"Cookie": sessionCookie + "=" + s.sid})
	defer c.cancel()
	c.next(t, "heartbeat")
	if err := fs.Revoke(t.Context(), s.sid); err != nil {
		t.Fatal(err)
	}
	ev.publish(t, events.InstanceStopped, "web1", nil, nil)
	deadline := time.After(20 * time.Second)
	for ended := false; !ended; {
		select {
		case m, ok := <-c.msgs: // closed when the stream ends
			ended = !ok
			if m.Event == "heartbeat" {
				t.Error("a heartbeat after the session was revoked")
			}
		case <-deadline:
			t.Fatal("the stream still runs 20s after its session was revoked")
		}
	}
	waitStreams(t, d, 0)
}

// TestCookielessFloodBounded: cookie-less GETs (what image loads from a
// hostile page send) leave nothing behind: no session lookup, no stored
// CSRF token, a flat heap, with Sessions (the login page) and without (the
// pages, with a signed anonymous CSRF cookie).
func TestCookielessFloodBounded(t *testing.T) {
	const n = 100_000
	for _, withSessions := range []bool{true, false} {
		t.Run(fmt.Sprintf("sessions=%v", withSessions), func(t *testing.T) {
			fs := newFakeSessions()
			cfg := Config{}
			if withSessions {
				cfg.Sessions = fs
			}
			app, d := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), newBusEvents(), cfg)
			base := server(t, app, d)
			// Without Sessions, a path that goes through the CSRF
			// middleware (which sets the anonymous cookie) but renders
			// little: the flood measures what stays, not templ.
			target, want := "/instances/nope", http.StatusNotFound
			if withSessions {
				target, want = "/instances", http.StatusUnauthorized
			}
			flood := func(count int) {
				const workers = 8
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				for w := range workers {
					wg.Go(func() {
						tr := &http.Transport{MaxIdleConnsPerHost: 1}
						defer tr.CloseIdleConnections()
						client := &http.Client{Transport: tr}
						for i := w; i < count; i += workers {
							req, _ := http.NewRequest("GET", base+target, nil)
							req.Header.Set("Accept", htmlAccept)
							res, err := client.Do(req)
							if err != nil {
								errs <- err
								return
							}
							if !withSessions && len(res.Cookies()) == 0 {
								errs <- fmt.Errorf("GET %s set no anonymous CSRF cookie", target)
								return
							}
							io.Copy(io.Discard, res.Body)
							res.Body.Close()
							if res.StatusCode != want {
								errs <- fmt.Errorf("GET %s: %d, want %d", target, res.StatusCode, want)
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			}
			heap := func() uint64 {
				var m runtime.MemStats
				runtime.GC()
				runtime.GC()
				runtime.ReadMemStats(&m)
				return m.HeapInuse
			}
			flood(10_000) // warm the pools
			before := heap()
			flood(n)
			after := heap()
			t.Logf("%d cookie-less GETs: heap in use %.1f MB -> %.1f MB", n, float64(before)/1e6, float64(after)/1e6)
			// fiber's csrf storage kept ~250 bytes per request: 25 MB here.
			if after > before+4<<20 {
				t.Errorf("heap in use grew by %.1f MB over %d cookie-less GETs", float64(after-before)/1e6, n)
			}
			if v := fs.validations.Load(); v != 0 {
				t.Errorf("%d session lookups for requests without a cookie", v)
			}
			if fs.live() != 0 {
				t.Errorf("%d sessions exist", fs.live())
			}
		})
	}
}
