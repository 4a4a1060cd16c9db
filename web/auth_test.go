package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
)

const htmlAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// browserReq builds a request as a browser sends it: Accept text/html, the
// session cookie (if sid is set) and, for a form, the encoded body.
func browserReq(method, target, sid string, form url.Values) *http.Request {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	req.Header.Set("Accept", htmlAccept)
	if sid != "" {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: sid})
	}
	return req
}

// signedIn is a browser with a dashboard session: the cookie's session id
// and the CSRF token its pages embed.
type signedIn struct{ sid, token string }

func signIn(t *testing.T, app *fiber.App, fs *fakeSessions) signedIn {
	t.Helper()
	res, body, _ := do(t, app, browserReq(http.MethodGet, "/login?token="+fs.issue(), "", nil))
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d %q, want 303", res.StatusCode, body)
	}
	var s signedIn
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			s.sid = c.Value
		}
	}
	if s.sid == "" {
		t.Fatalf("login set no %s cookie", sessionCookie)
	}
	_, _, doc := do(t, app, browserReq(http.MethodGet, "/instances", s.sid, nil))
	s.token = doc.Find(`[data-testid="bulk-form"] input[name="_csrf"]`).AttrOr("value", "")
	if s.token == "" {
		t.Fatal("no CSRF token in the signed-in instances page")
	}
	return s
}

func newAuthApp(t *testing.T, inst *fakeInstances) (*fiber.App, *fakeSessions) {
	t.Helper()
	fs := newFakeSessions()
	app, _ := newTestApp(inst, newBusEvents(), Config{Sessions: fs, Editor: &fakeEditor{inst: inst}, Consoles: fakeConsoles{"web1": ""}})
	return app, fs
}

func sessionCookieOf(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

func TestLogin(t *testing.T) {
	app, fs := newAuthApp(t, newFakeInstances(ready("web1", time.Minute, time.Second)))
	used := fs.issue()
	do(t, app, browserReq(http.MethodGet, "/login?token="+used, "", nil))

	tests := []struct {
		name    string
		token   func() string
		header  map[string]string
		status  int
		errText string // on the login page's error line
		session bool   // a session cookie is set
	}{
		{"valid", fs.issue, nil, http.StatusSeeOther, "", true},
		{"valid, typed in the address bar", fs.issue, map[string]string{"Sec-Fetch-Site": "none"}, http.StatusSeeOther, "", true},
		{"used", func() string { return used }, nil, http.StatusUnauthorized, "already used, it expired, or it was never issued", false},
		{"unknown", func() string { return "nope" }, nil, http.StatusUnauthorized, "already used", false},
		{"too long", func() string { return strings.Repeat("a", 600) }, nil, http.StatusBadRequest, "600 bytes long, more than 512", false},
		{"none", func() string { return "" }, nil, http.StatusUnauthorized, "", false},
		{"sent by another site", fs.issue, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusOK, "", false},
		{"sent by another port", fs.issue, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusOK, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := tt.token()
			req := browserReq(http.MethodGet, "/login?token="+url.QueryEscape(tok), "", nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			before := fs.live()
			res, body, doc := do(t, app, req)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			c := sessionCookieOf(res)
			if (c != nil && c.Value != "") != tt.session {
				t.Fatalf("session cookie %v, want set=%v", c, tt.session)
			}
			if tt.session {
				if loc := res.Header.Get("Location"); loc != "/" {
					t.Errorf("redirect to %q, want / (no token in the URL)", loc)
				}
				if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
					t.Errorf("cookie HttpOnly=%v SameSite=%v Path=%q Secure=%v, want HttpOnly, Strict, /, not Secure over plain HTTP", c.HttpOnly, c.SameSite, c.Path, c.Secure)
				}
				if d := time.Until(c.Expires); d < 59*time.Minute || d > time.Hour+time.Second {
					t.Errorf("cookie expires in %v, want the session's hour", d)
				}
				if fs.live() != before+1 {
					t.Errorf("%d sessions after login, want %d", fs.live(), before+1)
				}
				return
			}
			if fs.live() != before {
				t.Errorf("a session was opened (%d -> %d)", before, fs.live())
			}
			if doc.Find(`[data-testid="login-page"]`).Length() != 1 {
				t.Fatalf("not the login page: %s", body)
			}
			if !strings.Contains(doc.Find(`[data-testid="login-command"]`).Text(), "guestlink dashboard") {
				t.Error("the login page does not say how to get in")
			}
			errLine := doc.Find(`[data-testid="login-error"]`).Text()
			if tt.errText == "" && errLine != "" || !strings.Contains(errLine, tt.errText) {
				t.Errorf("error line %q, want %q", errLine, tt.errText)
			}
			if tt.status == http.StatusOK {
				// Another site sent the browser: a same-origin click
				// carries the token on, unredeemed so far.
				f := doc.Find(`form[data-testid="login-confirm"]`)
				if f.AttrOr("action", "") != "/login" || f.Find(`input[name="token"]`).AttrOr("value", "") != tok {
					t.Errorf("no confirmation form carrying the token: %s", body)
				}
				res, _, _ := do(t, app, browserReq(http.MethodGet, "/login?token="+tok, "", nil))
				if res.StatusCode != http.StatusSeeOther {
					t.Errorf("the confirmed token: %d, want 303 (it must still be unused)", res.StatusCode)
				}
			}
		})
	}

	t.Run("service failure", func(t *testing.T) {
		fs.broken = errStoreDown
		defer func() { fs.broken = nil }()
		res, body, doc := do(t, app, browserReq(http.MethodGet, "/login?token="+fs.issue(), "", nil))
		if res.StatusCode != http.StatusInternalServerError || !strings.Contains(doc.Find(`[data-testid="login-error"]`).Text(), "database is locked") {
			t.Errorf("%d %s, want 500 saying why", res.StatusCode, body)
		}
	})

	t.Run("replaces the browser's session", func(t *testing.T) {
		old := signIn(t, app, fs)
		res, _, _ := do(t, app, browserReq(http.MethodGet, "/login?token="+fs.issue(), old.sid, nil))
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d", res.StatusCode)
		}
		if _, err := fs.Validate(t.Context(), old.sid); err == nil {
			t.Error("the replaced session is still valid")
		}
	})
}

// TestNoSessionNoData: without a valid session no route but the login page
// and the assets answers anything but 401, and no action runs.
func TestNoSessionNoData(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second))
	app, fs := newAuthApp(t, inst)
	valid := signIn(t, app, fs)
	revoked := signIn(t, app, fs)
	if err := fs.Revoke(t.Context(), revoked.sid); err != nil {
		t.Fatal(err)
	}
	expired := signIn(t, app, fs)
	fs.expire(expired.sid)

	type request struct {
		name, method, target string
		form                 url.Values
		header               map[string]string
		page                 bool // a browser page: answered with the login page
	}
	form := url.Values{"action": {"stop"}, "names": {"web1"}, "_csrf": {valid.token}}
	requests := []request{
		{"overview", "GET", "/", nil, nil, true},
		{"instances", "GET", "/instances?status=Running", nil, nil, true},
		{"instance page", "GET", "/instances/web1", nil, nil, true},
		{"unknown instance", "GET", "/instances/nope", nil, nil, true},
		{"htmx fragment", "GET", "/instances", nil, map[string]string{"HX-Request": "true"}, false},
		{"live stream", "GET", "/events", nil, map[string]string{"Accept": "text/event-stream"}, false},
		{"script", "GET", "/", nil, map[string]string{"Accept": "*/*"}, false},
		{"instance action", "POST", "/instances/web1/actions", form, nil, true},
		{"bulk action", "POST", "/instances/actions", form, nil, true},
		{"htmx action", "POST", "/instances/web1/actions", form, map[string]string{"HX-Request": "true", "X-CSRF-Token": valid.token}, false},
		{"logout", "POST", "/logout", form, nil, true},
		{"console stream", "GET", "/instances/web1/console/stream", nil, map[string]string{"Accept": "text/event-stream"}, false},
		{"console download", "GET", "/instances/web1/console.log", nil, nil, true},
		{"boot chart", "GET", "/instances/web1/bootchart", nil, nil, true},
		{"launch form", "GET", "/launch", nil, nil, true},
		{"launch", "POST", "/launch", url.Values{"name": {"x1"}, "backend": {"sim"}, "_csrf": {valid.token}}, nil, true},
		{"delete confirmation", "GET", "/instances/web1/delete", nil, nil, true},
		{"delete", "POST", "/instances/web1/delete", url.Values{"confirm": {"web1"}, "force": {"on"}, "_csrf": {valid.token}}, nil, true},
		{"config", "POST", "/instances/web1/config", url.Values{"new_key": {"user.x"}, "new_value": {"1"}, "_csrf": {valid.token}}, nil, true},
	}
	cookies := []struct{ name, sid string }{
		{"no cookie", ""},
		{"unknown session", "not-a-session"},
		{"revoked session", revoked.sid},
		{"expired session", expired.sid},
		{"oversized cookie", strings.Repeat("x", 600)},
	}
	for _, ck := range cookies {
		for _, r := range requests {
			t.Run(ck.name+"/"+r.name, func(t *testing.T) {
				req := browserReq(r.method, r.target, ck.sid, r.form)
				for k, v := range r.header {
					req.Header.Set(k, v)
				}
				before := len(inst.performed())
				res, body, doc := do(t, app, req)
				if res.StatusCode != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401: %.300s", res.StatusCode, body)
				}
				if len(inst.performed()) != before {
					t.Fatal("the action ran")
				}
				if strings.Contains(body, "uuid-web1") || strings.Contains(body, `data-name="web1"`) {
					t.Errorf("the answer shows instance data: %.300s", body)
				}
				if r.page {
					if doc.Find(`[data-testid="login-page"]`).Length() != 1 || !strings.Contains(body, "guestlink dashboard") {
						t.Errorf("not the login page saying how to get in: %.300s", body)
					}
				} else {
					var env api.Response[any]
					if err := json.Unmarshal([]byte(body), &env); err != nil || env.Type != api.TypeError || env.ErrorCode != 401 || !strings.Contains(env.Error, "guestlink dashboard") {
						t.Errorf("answer %q, want a 401 error envelope saying how to get in", body)
					}
				}
				if ck.sid != "" {
					if c := sessionCookieOf(res); c == nil || c.Value != "" || !c.Expires.Before(time.Now()) {
						t.Errorf("the stale session cookie is not cleared: %v", c)
					}
				}
			})
		}
	}
	t.Run("assets stay public", func(t *testing.T) {
		res, body, _ := get(t, app, "/assets/app.css")
		if res.StatusCode != http.StatusOK || len(body) < 100 {
			t.Errorf("GET /assets/app.css: %d, %d bytes", res.StatusCode, len(body))
		}
	})
	t.Run("service failure is not a login page", func(t *testing.T) {
		fs.broken = errStoreDown
		defer func() { fs.broken = nil }()
		res, body, _ := do(t, app, browserReq("GET", "/", valid.sid, nil))
		if res.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "checking the dashboard session: validating a session: database is locked") {
			t.Errorf("%d %q, want 500 saying why", res.StatusCode, body)
		}
	})
	t.Run("service failure naming a file shows no path", func(t *testing.T) {
		fs.broken = fmt.Errorf("open /var/lib/guestlink/guestlink.db: %w", errStoreDown)
		defer func() { fs.broken = nil }()
		res, body, _ := do(t, app, browserReq("GET", "/", valid.sid, nil))
		re := regexp.MustCompile(`^Internal Server Error: checking the dashboard session: validating a session: open <path>: database is locked \(request [0-9a-f]{16}; the daemon's log has the detail\)\n$`)
		if res.StatusCode != http.StatusInternalServerError || !re.MatchString(body) {
			t.Errorf("%d %q, want 500 matching %s", res.StatusCode, body, re)
		}
	})
}

func TestSignedIn(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second), stopped("db1", "sim"))
	app, fs := newAuthApp(t, inst)
	s := signIn(t, app, fs)
	who := "session/" + s.sid[:8]

	for _, p := range []string{"/", "/instances", "/instances/web1"} {
		t.Run("page "+p, func(t *testing.T) {
			res, body, doc := do(t, app, browserReq("GET", p, s.sid, nil))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %.300s", res.StatusCode, body)
			}
			if got := doc.Find(`[data-testid="who"]`).Text(); got != who {
				t.Errorf("signed in as %q, want %q", got, who)
			}
			lf := doc.Find(`form[data-testid="logout-form"]`)
			if lf.AttrOr("method", "") != "post" || lf.AttrOr("action", "") != "/logout" || lf.Find(`input[name="_csrf"]`).AttrOr("value", "") != s.token {
				t.Error("no Log out form posting the CSRF token")
			}
			if got := strings.TrimSpace(lf.Find(`button[data-testid="logout"]`).Text()); got != "Log out" {
				t.Errorf("logout button labelled %q", got)
			}
		})
	}

	t.Run("actions are done by the session", func(t *testing.T) {
		res, body, _ := do(t, app, browserReq("POST", "/instances/web1/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"stop"}}))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("instance action: %d %.300s", res.StatusCode, body)
		}
		res, body, _ = do(t, app, browserReq("POST", "/instances/actions", s.sid, url.Values{"_csrf": {s.token}, "action": {"start"}, "names": {"db1"}}))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("bulk action: %d %.300s", res.StatusCode, body)
		}
		by := inst.requestors()
		if len(by) != 2 {
			t.Fatalf("%d actions ran, want 2", len(by))
		}
		for _, r := range by {
			if r.Protocol != "dashboard" || r.Username != who {
				t.Errorf("requestor %+v, want protocol dashboard, username %q", r, who)
			}
		}
	})

	t.Run("activity names the session", func(t *testing.T) {
		ev := newBusEvents()
		ev.publish(t, events.InstanceStopped, "web1", nil, &events.Requestor{Protocol: "dashboard", Username: who})
		app, _ := newTestApp(inst, ev, Config{Sessions: fs})
		_, _, doc := do(t, app, browserReq("GET", "/", s.sid, nil))
		if got := strings.Join(strings.Fields(doc.Find(`[data-testid="activity-item"]`).Text()), " "); !strings.Contains(got, "by dashboard "+who) {
			t.Errorf("activity %q does not name the session", got)
		}
	})
}

func TestCSRFTiedToSession(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second))
	app, fs := newAuthApp(t, inst)
	a, b := signIn(t, app, fs), signIn(t, app, fs)
	if a.token == b.token {
		t.Fatal("two sessions have the same CSRF token")
	}
	// The token is the same on every page of a session: nothing is minted
	// per request.
	_, _, doc := do(t, app, browserReq("GET", "/instances/web1", a.sid, nil))
	if got := doc.Find(`[data-testid="instance-actions"] input[name="_csrf"]`).AttrOr("value", ""); got != a.token {
		t.Errorf("instance page token %q, instances page %q: want one token per session", got, a.token)
	}
	if got := doc.Find(`meta[name="csrf-token"]`).AttrOr("content", ""); got != a.token {
		t.Errorf("meta csrf-token %q, want %q", got, a.token)
	}
	stop := url.Values{"action": {"stop"}}
	with := func(tok string) url.Values {
		v := url.Values{"action": {"stop"}, "_csrf": {tok}}
		return v
	}
	tests := []struct {
		name   string
		sid    string
		form   url.Values
		header map[string]string
		status int
	}{
		{"own token in the form", a.sid, with(a.token), nil, http.StatusOK},
		{"own token in the header", a.sid, stop, map[string]string{"X-CSRF-Token": a.token}, http.StatusOK},
		{"another session's token", a.sid, with(b.token), nil, http.StatusForbidden},
		{"no token", a.sid, stop, nil, http.StatusForbidden},
		{"empty token", a.sid, with(""), nil, http.StatusForbidden},
		{"truncated token", a.sid, with(a.token[:20]), nil, http.StatusForbidden},
		{"cross-site", a.sid, with(a.token), map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"another port of this host", a.sid, with(a.token), map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"foreign origin", a.sid, with(a.token), map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"null origin", a.sid, with(a.token), map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"null origin, cross-site", a.sid, with(a.token), map[string]string{"Origin": "null", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		// Chromium's form post under Referrer-Policy: no-referrer.
		{"null origin, same-origin", a.sid, with(a.token), map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"own origin", a.sid, with(a.token), map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := browserReq("POST", "/instances/web1/actions", tt.sid, tt.form)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			before := len(inst.performed())
			res, body, _ := do(t, app, req)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %.300s", res.StatusCode, tt.status, body)
			}
			if ran := len(inst.performed()) > before; ran != (tt.status == http.StatusOK) {
				t.Errorf("action ran = %v", ran)
			}
		})
	}
}

func TestLogout(t *testing.T) {
	app, fs := newAuthApp(t, newFakeInstances(ready("web1", time.Minute, time.Second)))
	s := signIn(t, app, fs)

	res, _, _ := do(t, app, browserReq("POST", "/logout", s.sid, url.Values{}))
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("logout without the CSRF token: %d, want 403", res.StatusCode)
	}
	if _, err := fs.Validate(t.Context(), s.sid); err != nil {
		t.Fatalf("a refused logout ended the session: %v", err)
	}

	res, body, _ := do(t, app, browserReq("POST", "/logout", s.sid, url.Values{"_csrf": {s.token}}))
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?out=1" {
		t.Fatalf("logout: %d to %q (%s), want 303 to /login?out=1", res.StatusCode, res.Header.Get("Location"), body)
	}
	if c := sessionCookieOf(res); c == nil || c.Value != "" || !c.Expires.Before(time.Now()) || !c.HttpOnly {
		t.Errorf("logout does not clear the cookie: %v", c)
	}
	if _, err := fs.Validate(t.Context(), s.sid); err == nil {
		t.Error("the session is still valid after logout")
	}
	res, _, doc := do(t, app, browserReq("GET", "/login?out=1", "", nil))
	if res.StatusCode != http.StatusUnauthorized || doc.Find(`[data-testid="login-notice"]`).Text() != "You are signed out." {
		t.Errorf("after logout: %d, notice %q", res.StatusCode, doc.Find(`[data-testid="login-notice"]`).Text())
	}
	res, _, _ = do(t, app, browserReq("GET", "/", s.sid, nil))
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old cookie still opens pages: %d", res.StatusCode)
	}
}

// TestWithoutSessions: a dashboard with no Sessions stays open, as before,
// and has no login.
func TestWithoutSessions(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(ready("web1", time.Minute, time.Second)), newBusEvents(), Config{})
	res, _, doc := do(t, app, browserReq("GET", "/", "", nil))
	if res.StatusCode != http.StatusOK || doc.Find(`[data-testid="logout-form"]`).Length() != 0 {
		t.Errorf("overview: %d, logout form shown = %v; want 200 with no login", res.StatusCode, doc.Find(`[data-testid="logout-form"]`).Length() != 0)
	}
	res, _, _ = do(t, app, browserReq("GET", "/login?token=x", "", nil))
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Errorf("/login: %d to %q, want 303 to /", res.StatusCode, res.Header.Get("Location"))
	}
	res, _, _ = do(t, app, browserReq("POST", "/logout", "", url.Values{}))
	if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("/logout: %d, want no such route", res.StatusCode)
	}
}
