package web

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// do runs one request through the app and returns the status, body and the
// parsed document.
func do(t *testing.T, app *fiber.App, req *http.Request) (*http.Response, string, *goquery.Document) {
	t.Helper()
	res, err := app.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the answer to %s %s: %v", req.Method, req.URL, err)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parsing the answer to %s %s: %v", req.Method, req.URL, err)
	}
	return res, string(b), doc
}

func get(t *testing.T, app *fiber.App, target string) (*http.Response, string, *goquery.Document) {
	t.Helper()
	return do(t, app, httptest.NewRequest(http.MethodGet, target, nil))
}

// session is a browser's CSRF state: the cookie and the token the page
// embeds in its forms.
type session struct{ cookie, token string }

func openSession(t *testing.T, app *fiber.App) session {
	t.Helper()
	res, _, doc := get(t, app, "/instances")
	var s session
	for _, c := range res.Cookies() {
		if c.Name == "guestlink_csrf" {
			s.cookie = c.Value
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("CSRF cookie: HttpOnly=%v SameSite=%v, want HttpOnly and Strict", c.HttpOnly, c.SameSite)
			}
		}
	}
	s.token, _ = doc.Find(`[data-testid="bulk-form"] input[name="_csrf"]`).Attr("value")
	if s.cookie == "" || s.token == "" {
		t.Fatalf("no CSRF cookie (%q) or form token (%q) on /instances", s.cookie, s.token)
	}
	return s
}

func post(target string, form url.Values, s session, header map[string]string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if s.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "guestlink_csrf", Value: s.cookie})
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

func TestOverview(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, 1500*time.Millisecond), running("web2", instance.AgentNone), running("web3", instance.AgentLost), stopped("db1", "sim"))
	ev := newBusEvents()
	ev.publish(t, events.InstanceStarted, "web1", nil, &events.Requestor{Protocol: "unix"})
	ev.publish(t, events.InstanceReady, "web1", nil, &events.Requestor{Protocol: "devlxd"})
	app, _ := newTestApp(inst, ev, Config{})

	res, _, doc := get(t, app, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d", res.StatusCode)
	}
	counts := map[string]string{}
	doc.Find(`[data-testid="count"]`).Each(func(_ int, s *goquery.Selection) {
		counts[s.AttrOr("data-label", "")] = s.AttrOr("data-n", "")
	})
	for label, want := range map[string]string{"Ready": "1", "Running": "2", "Stopped": "1", "Error": "0", "connected": "1", "lost": "1", "starting": "1", "none expected": "1"} {
		if counts[label] != want {
			t.Errorf("count %q = %q, want %q (all: %v)", label, counts[label], want, counts)
		}
	}
	health := map[string]string{}
	doc.Find(`[data-testid="backend"]`).Each(func(_ int, s *goquery.Selection) {
		health[s.AttrOr("data-name", "")] = s.Find(`[data-testid="backend-health"]`).AttrOr("data-value", "")
	})
	if health["sim"] != "healthy" || health["qemu"] != "failed" {
		t.Errorf("backend health = %v, want sim healthy, qemu failed", health)
	}
	var acts []string
	doc.Find(`[data-testid="activity-item"]`).Each(func(_ int, s *goquery.Selection) {
		acts = append(acts, s.AttrOr("data-event-id", "")+":"+strings.Join(strings.Fields(s.Text()), " "))
	})
	if len(acts) != 2 || !strings.HasPrefix(acts[0], "2:") || !strings.Contains(acts[0], "web1 ready by devlxd") {
		t.Errorf("recent activity = %q, want newest first: 2 (web1 ready by devlxd), 1", acts)
	}
	if got := doc.Find("body").AttrOr("data-last-event-id", ""); got != "2" {
		t.Errorf("page's last event id = %q, want 2", got)
	}
	if got := doc.Find("body").AttrOr("data-heartbeat-ms", ""); got != "10000" {
		t.Errorf("page's heartbeat period = %q ms, want the default 10000", got)
	}
	// The overview's stream carries what it shows: activity and counts.
	if got := doc.Find("body").AttrOr("sse-connect", ""); got != "/events?since=2&view=overview" {
		t.Errorf("sse-connect = %q, want /events?since=2&view=overview", got)
	}
	if got := doc.Find("body").AttrOr("data-stream-scope", ""); got != "view=overview" {
		t.Errorf("data-stream-scope = %q, want view=overview", got)
	}
}

func TestInstancesFilterPassThrough(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second), running("web2", instance.AgentStarted), stopped("db1", "qemu"))
	app, _ := newTestApp(inst, newBusEvents(), Config{})
	tests := []struct {
		name  string
		query string
		want  instance.ListFilter
		rows  []string
	}{
		{"none", "", instance.ListFilter{}, []string{"db1", "web1", "web2"}},
		{"Running matches Ready", "status=Running", instance.ListFilter{Status: "Running"}, []string{"web1", "web2"}},
		{"Ready only", "status=Ready", instance.ListFilter{Status: "Ready"}, []string{"web1"}},
		{"agent none", "agent=none", instance.ListFilter{Agent: "none"}, []string{"db1"}},
		{"agent started", "agent=started", instance.ListFilter{Agent: "started"}, []string{"web2"}},
		{"backend", "backend=qemu", instance.ListFilter{Backend: "qemu"}, []string{"db1"}},
		{"free text trimmed", "q=+WEB+", instance.ListFilter{Query: "WEB"}, []string{"web1", "web2"}},
		{"all together", "status=Running&agent=connected&backend=sim&q=web", instance.ListFilter{Status: "Running", Agent: "connected", Backend: "sim", Query: "web"}, []string{"web1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, doc := get(t, app, "/instances?"+tt.query)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := inst.lastFilter(); got != tt.want {
				t.Errorf("service asked for %+v, want %+v", got, tt.want)
			}
			var rows []string
			doc.Find(`[data-testid="instance-row"]`).Each(func(_ int, s *goquery.Selection) { rows = append(rows, s.AttrOr("data-name", "")) })
			if !slices.Equal(rows, tt.rows) {
				t.Errorf("rows %v, want %v", rows, tt.rows)
			}
			if doc.Find(`[data-testid="no-instances"]`).Length() != 0 {
				t.Error("the empty-table row is shown with rows present")
			}
		})
	}
}

func TestInstancesBadQuery(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{})
	tests := []struct{ name, query, want string }{
		{"status", "status=Bogus", `unknown status filter "Bogus"`},
		{"agent", "agent=sleepy", `unknown agent filter "sleepy"`},
		{"sort", "sort=size", `unknown sort "size" (name, status, started, ready)`},
		{"page not a number", "page=two", `invalid page "two": want a positive integer`},
		{"page zero", "page=0", `invalid page "0"`},
		{"page negative", "page=-3", `invalid page "-3"`},
		{"long search", "q=" + strings.Repeat("x", 300), "search text of 300 bytes is longer than 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body, _ := get(t, app, "/instances?"+tt.query)
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", res.StatusCode)
			}
			if !strings.Contains(body, tt.want) {
				t.Errorf("body %q does not say %q", body, tt.want)
			}
		})
	}
}

func TestInstancesPagination(t *testing.T) {
	var list []*instance.Instance
	for i := range 250 {
		list = append(list, stopped(fmt.Sprintf("vm%04d", i), "sim"))
	}
	app, _ := newTestApp(newFakeInstances(list...), newBusEvents(), Config{PageSize: 100})
	tests := []struct {
		name, query, first, last string
		n                        int
		prev, next               string
	}{
		{"first", "", "vm0000", "vm0099", 100, "", "/instances?page=2"},
		{"middle keeps filter", "q=vm&page=2", "vm0100", "vm0199", 100, "/instances?q=vm", "/instances?page=3&q=vm"},
		{"last", "page=3", "vm0200", "vm0249", 50, "/instances?page=2", ""},
		{"past the end clamps", "page=9", "vm0200", "vm0249", 50, "/instances?page=2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, doc := get(t, app, "/instances?"+tt.query)
			rows := doc.Find(`[data-testid="instance-row"]`)
			if rows.Length() != tt.n || rows.First().AttrOr("data-name", "") != tt.first || rows.Last().AttrOr("data-name", "") != tt.last {
				t.Errorf("rows: %d from %s to %s, want %d from %s to %s", rows.Length(), rows.First().AttrOr("data-name", ""), rows.Last().AttrOr("data-name", ""), tt.n, tt.first, tt.last)
			}
			if got := doc.Find(`[data-testid="pager"] a[rel="prev"]`).AttrOr("href", ""); got != tt.prev {
				t.Errorf("prev link %q, want %q", got, tt.prev)
			}
			if got := doc.Find(`[data-testid="pager"] a[rel="next"]`).AttrOr("href", ""); got != tt.next {
				t.Errorf("next link %q, want %q", got, tt.next)
			}
			if got := doc.Find(`[data-testid="total"]`).Text(); got != "250 instances" {
				t.Errorf("total %q, want 250 instances", got)
			}
		})
	}
}

func TestInstancesSort(t *testing.T) {
	a := ready("a", time.Hour, 3*time.Second)
	b := ready("b", 30*time.Second, time.Second)
	c := running("c", instance.AgentConnected)
	d := stopped("d", "sim")
	app, _ := newTestApp(newFakeInstances(d, c, b, a), newBusEvents(), Config{})
	tests := []struct {
		sort string
		want []string
	}{
		{"name", []string{"a", "b", "c", "d"}},
		{"status", []string{"a", "b", "c", "d"}},
		{"started", []string{"b", "c", "a", "d"}},
		{"ready", []string{"b", "a", "c", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.sort, func(t *testing.T) {
			_, _, doc := get(t, app, "/instances?sort="+tt.sort)
			var rows []string
			doc.Find(`[data-testid="instance-row"]`).Each(func(_ int, s *goquery.Selection) { rows = append(rows, s.AttrOr("data-name", "")) })
			if !slices.Equal(rows, tt.want) {
				t.Errorf("order %v, want %v", rows, tt.want)
			}
		})
	}
}

func TestInstancePage(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, 1500*time.Millisecond))
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	inst.timeline["web1"] = []instance.TimelineEntry{
		{Time: t0, Boot: 1, Kind: "state", From: "stopped", To: "running", Cause: "api"},
		{Time: t0.Add(time.Second), Boot: 1, Kind: "agent", From: "", To: "connected", Cause: "agent"},
		{Time: t0.Add(2 * time.Second), Boot: 1, Kind: "ready", From: "false", To: "true", Cause: "devlxd"},
		{Time: t0.Add(time.Minute), Boot: 2, Kind: "state", From: "stopped", To: "running", Cause: "api", Detail: "restart"},
	}
	app, _ := newTestApp(inst, newBusEvents(), Config{})
	res, _, doc := get(t, app, "/instances/web1")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if got := doc.Find(`[data-testid="instance-name"]`).Text(); got != "web1" {
		t.Errorf("name %q", got)
	}
	if got := doc.Find(`#istatus-web1`).AttrOr("data-value", ""); got != "Ready" {
		t.Errorf("status badge %q, want Ready", got)
	}
	if got := doc.Find(`#iagent-web1`).AttrOr("data-value", ""); got != "connected" {
		t.Errorf("agent badge %q, want connected", got)
	}
	if got := doc.Find(`[data-testid="facts"] [data-testid="time-to-ready"]`).Text(); got != "1.5s" {
		t.Errorf("time to ready %q, want 1.5s", got)
	}
	var tl []string
	doc.Find(`#timeline-web1 [data-testid="timeline-entry"]`).Each(func(_ int, s *goquery.Selection) {
		tl = append(tl, s.AttrOr("data-boot", "")+":"+s.AttrOr("data-kind", "")+":"+s.AttrOr("data-to", "")+":"+s.AttrOr("data-cause", ""))
	})
	want := []string{"2:state:running:api", "1:ready:true:devlxd", "1:agent:connected:agent", "1:state:running:api"}
	if !slices.Equal(tl, want) {
		t.Errorf("timeline %v, want newest first %v", tl, want)
	}
	var keys []string
	doc.Find(`[data-testid="config"] tr`).Each(func(_ int, s *goquery.Selection) { keys = append(keys, s.AttrOr("data-key", "")) })
	if !slices.Equal(keys, []string{"cloud-init.user-data", "user.role"}) {
		t.Errorf("guest config keys %v, want only cloud-init.* and user.*", keys)
	}
	if n := doc.Find(`[data-testid="devices"] li`).Length(); n != 2 {
		t.Errorf("%d devices, want 2", n)
	}
	if got := doc.Find(`[data-testid="link"]`).Text(); got != "hybrid" {
		t.Errorf("link %q, want hybrid", got)
	}

	// The boot chart: boots 2 and 1, newest first, boot 1 with its Ready.
	var rows []string
	doc.Find(`[data-testid="boot-chart"] [data-testid="boot-row"]`).Each(func(_ int, s *goquery.Selection) {
		var phases []string
		s.Find("rect[data-phase]").Each(func(_ int, r *goquery.Selection) { phases = append(phases, r.AttrOr("data-phase", "")) })
		rows = append(rows, s.AttrOr("data-boot", "")+":"+strings.Join(phases, ","))
	})
	if want := []string{"2:boot", "1:boot,wait,ready"}; !slices.Equal(rows, want) {
		t.Errorf("boot chart rows %v, want %v", rows, want)
	}
	// The chart alone, as live.js fetches it after a live update.
	res, _, frag := get(t, app, "/instances/web1/bootchart")
	if res.StatusCode != http.StatusOK || frag.Find(`#bootchart-web1 [data-testid="boot-row"]`).Length() != 2 || frag.Find("html body h1").Length() != 0 {
		t.Errorf("GET /instances/web1/bootchart: %d, want the chart alone with 2 rows", res.StatusCode)
	}

	res, body, _ := get(t, app, "/instances/nope")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, `"nope"`) {
		t.Errorf("unknown instance: %d %q, want 404 naming it", res.StatusCode, body)
	}
}

func TestActionsCSRF(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second))
	app, _ := newTestApp(inst, newBusEvents(), Config{})
	s := openSession(t, app)
	form := func(tok string) url.Values {
		v := url.Values{"action": {"stop"}}
		if tok != "" {
			v.Set("_csrf", tok)
		}
		return v
	}
	tests := []struct {
		name   string
		req    *http.Request
		status int
		ran    bool
	}{
		{"no token", post("/instances/web1/actions", form(""), s, nil), http.StatusForbidden, false},
		{"no cookie", post("/instances/web1/actions", form(s.token), session{}, nil), http.StatusForbidden, false},
		{"wrong token", post("/instances/web1/actions", form("x"+s.token), s, nil), http.StatusForbidden, false},
		{"cross-site fetch", post("/instances/web1/actions", form(s.token), s, map[string]string{"Sec-Fetch-Site": "cross-site"}), http.StatusForbidden, false},
		{"same-site fetch", post("/instances/web1/actions", form(s.token), s, map[string]string{"Sec-Fetch-Site": "same-site"}), http.StatusForbidden, false},
		{"foreign origin", post("/instances/web1/actions", form(s.token), s, map[string]string{"Origin": "http://evil.example"}), http.StatusForbidden, false},
		{"null origin", post("/instances/web1/actions", form(s.token), s, map[string]string{"Origin": "null"}), http.StatusForbidden, false},
		{"bulk without token", post("/instances/actions", url.Values{"action": {"stop"}, "names": {"web1"}}, s, nil), http.StatusForbidden, false},
		{"token and same origin", post("/instances/web1/actions", form(s.token), s, map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}), http.StatusOK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(inst.performed())
			res, body, doc := do(t, app, tt.req)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d (%q), want %d", res.StatusCode, body, tt.status)
			}
			ran := len(inst.performed()) > before
			if ran != tt.ran {
				t.Errorf("action ran = %v, want %v", ran, tt.ran)
			}
			if tt.ran {
				o := doc.Find(`[data-testid="outcome"][data-name="web1"]`)
				if o.AttrOr("data-ok", "") != "true" {
					t.Errorf("outcome %q, want ok", o.Text())
				}
			}
		})
	}
}

func TestInstanceActions(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second), stopped("bad", "sim"), stopped("pathy", "qemu"))
	inst.failing["bad"] = errBoom
	// A failure of no known kind that names a file: the outcome shows the
	// message without the path, and the request id of the log line.
	inst.failing["pathy"] = errors.New("qemu: could not open /var/lib/guestlink/storage-pools/default/custom/v.raw: Permission denied")
	app, _ := newTestApp(inst, newBusEvents(), Config{})
	s := openSession(t, app)
	tests := []struct {
		name, target, action string
		status               int
		did                  string
		errText              string
	}{
		{"start", "web1", "start", 200, "start web1", ""},
		{"stop", "web1", "stop", 200, "stop(force=false) web1", ""},
		{"force stop", "web1", "force-stop", 200, "stop(force=true) web1", ""},
		{"restart", "web1", "restart", 200, "restart web1", ""},
		{"failing", "bad", "start", http.StatusUnprocessableEntity, "start bad", "backend refused"},
		{"failing naming a file", "pathy", "start", http.StatusUnprocessableEntity, "start pathy", `start instance "pathy": qemu: could not open <path>: Permission denied (request `},
		{"unknown action", "web1", "explode", http.StatusUnprocessableEntity, "", `unknown action "explode"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(inst.performed())
			res, body, doc := do(t, app, post("/instances/"+tt.target+"/actions", url.Values{"_csrf": {s.token}, "action": {tt.action}}, s, nil))
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			done := inst.performed()[before:]
			if tt.did == "" && len(done) != 0 || tt.did != "" && !slices.Equal(done, []string{tt.did}) {
				t.Errorf("service calls %v, want %q", done, tt.did)
			}
			o := doc.Find(`[data-testid="outcome"]`)
			if o.Length() != 1 || o.AttrOr("data-name", "") != tt.target {
				t.Fatalf("outcomes %q, want one for %s", o.Text(), tt.target)
			}
			if ok := o.AttrOr("data-ok", ""); (ok == "true") != (tt.errText == "") || !strings.Contains(o.Text(), tt.errText) {
				t.Errorf("outcome ok=%s %q, want error %q", ok, o.Text(), tt.errText)
			}
			if strings.Contains(body, "/var/lib/guestlink") {
				t.Errorf("the page shows a host path: %q", o.Text())
			}
			if doc.Find(`[data-testid="instance-name"]`).Text() != tt.target {
				t.Error("the answer is not the instance page")
			}
		})
	}
}

func TestBulkAction(t *testing.T) {
	inst := newFakeInstances(ready("web1", time.Minute, time.Second), running("web2", instance.AgentConnected), running("web3", instance.AgentLost), stopped("db1", "sim"))
	inst.failing["web2"] = errBoom
	app, _ := newTestApp(inst, newBusEvents(), Config{})
	s := openSession(t, app)

	form := url.Values{"_csrf": {s.token}, "action": {"force-stop"}, "names": {"web1", "web2", "web3"}, "q": {"web"}, "status": {"Running"}}
	res, body, doc := do(t, app, post("/instances/actions", form, s, nil))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if got, want := inst.performed(), []string{"stop(force=true) web1", "stop(force=true) web2", "stop(force=true) web3"}; !slices.Equal(got, want) {
		t.Errorf("service calls %v, want %v", got, want)
	}
	got := map[string]string{}
	doc.Find(`[data-testid="outcome"]`).Each(func(_ int, o *goquery.Selection) {
		got[o.AttrOr("data-name", "")] = o.AttrOr("data-ok", "")
		if o.AttrOr("data-name", "") == "web2" && !strings.Contains(o.Text(), "backend refused") {
			t.Errorf("web2's outcome %q does not say why", o.Text())
		}
	})
	if want := map[string]string{"web1": "true", "web2": "false", "web3": "true"}; !maps.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	// The table comes back as it was filtered.
	if f := inst.lastFilter(); f.Query != "web" || f.Status != "Running" {
		t.Errorf("table after the action listed with %+v, want the form's filter", f)
	}

	res, _, doc = do(t, app, post("/instances/actions", url.Values{"_csrf": {s.token}, "action": {"stop"}}, s, nil))
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(doc.Find(`[data-testid="outcome"]`).Text(), "no instance selected") {
		t.Errorf("empty selection: %d %q, want 422 and a message", res.StatusCode, doc.Find(`[data-testid="outcomes"]`).Text())
	}
	res, body, _ = do(t, app, post("/instances/actions", url.Values{"_csrf": {s.token}, "action": {"stop"}, "names": {"web1"}, "sort": {"size"}}, s, nil))
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `unknown sort "size"`) {
		t.Errorf("bad carried filter: %d %q, want 400", res.StatusCode, body)
	}
}

func TestAssets(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{})
	for _, p := range []string{"/assets/app.css", "/assets/htmx.min.js", "/assets/htmx-ext-sse.min.js", "/assets/live.js"} {
		t.Run(p, func(t *testing.T) {
			res, body, _ := get(t, app, p)
			if res.StatusCode != http.StatusOK || len(body) < 100 {
				t.Errorf("%s: %d, %d bytes", p, res.StatusCode, len(body))
			}
		})
	}
}
