package components

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"

	"github.com/guestlink/guestlink/api"
)

func render(t *testing.T, c templ.Component) *goquery.Document {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("rendering: %v", err)
	}
	doc, err := goquery.NewDocumentFromReader(&buf)
	if err != nil {
		t.Fatalf("parsing: %v", err)
	}
	return doc
}

var now = time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := now.Add(d); return &t }

func inst(name, status string, agent string) *api.Instance {
	return &api.Instance{Name: name, Status: status, Backend: "sim", Config: map[string]string{}, Agent: api.AgentInfo{State: agent}}
}

func rowOf(t *testing.T, i *api.Instance) *goquery.Selection {
	t.Helper()
	doc := render(t, InstancesPage(InstancesData{Meta: Meta{Now: now}, Rows: []*api.Instance{i}, Total: 1, Pages: 1, Filter: Filter{Sort: "name", Page: 1}}))
	row := doc.Find(`[data-testid="instance-row"][data-name="` + i.Name + `"]`)
	if row.Length() != 1 {
		t.Fatalf("%d rows for %s", row.Length(), i.Name)
	}
	return row
}

func TestStatusBadges(t *testing.T) {
	tests := []struct {
		status string
		tone   Tone
		glyph  string
	}{
		{"Ready", ToneGood, "✓"},
		{"Running", ToneActive, "▶"},
		{"Starting", ToneWait, "…"},
		{"Stopping", ToneWait, "…"},
		{"Stopped", ToneIdle, "■"},
		{"Error", ToneBad, "!"},
	}
	classes := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			b := rowOf(t, inst("vm", tt.status, api.AgentNone)).Find(`[data-testid="status-badge"]`)
			if b.AttrOr("id", "") != "status-vm" || b.AttrOr("data-value", "") != tt.status {
				t.Errorf("badge id=%q value=%q", b.AttrOr("id", ""), b.AttrOr("data-value", ""))
			}
			if got := b.Find(`[aria-hidden="true"]`).Text(); got != tt.glyph {
				t.Errorf("glyph %q, want %q", got, tt.glyph)
			}
			if b.Find(".sr-only").Length() != 1 || b.AttrOr("title", "") == "" {
				t.Error("badge has no description for assistive technology")
			}
			if b.AttrOr("class", "") != BadgeClass(tt.tone) {
				t.Errorf("class %q is not the %s tone", b.AttrOr("class", ""), tt.tone)
			}
			classes[tt.status] = b.AttrOr("class", "")
		})
	}
	if classes["Ready"] == classes["Running"] {
		t.Error("Ready and Running look the same")
	}
	if !strings.Contains(classes["Ready"], "emerald") {
		t.Errorf("Ready is not shown as the good state: %q", classes["Ready"])
	}
}

func TestAgentBadges(t *testing.T) {
	tests := []struct {
		name   string
		status string
		agent  string
		want   string
		tone   Tone
	}{
		{"stopped instance", "Stopped", api.AgentNone, "none expected", ToneIdle},
		{"error instance", "Error", api.AgentNone, "none expected", ToneIdle},
		{"running without agent yet", "Running", api.AgentNone, "starting", ToneWait},
		{"agent started", "Running", api.AgentStarted, "started", ToneWait},
		{"connected", "Ready", api.AgentConnected, "connected", ToneGood},
		{"lost", "Running", api.AgentLost, "lost", ToneBad},
		{"agent stopped", "Running", api.AgentStopped, "stopped", ToneIdle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := rowOf(t, inst("vm", tt.status, tt.agent)).Find(`[data-testid="agent-badge"]`)
			if b.AttrOr("id", "") != "agent-vm" || b.AttrOr("data-value", "") != tt.want {
				t.Errorf("agent badge id=%q value=%q, want %q", b.AttrOr("id", ""), b.AttrOr("data-value", ""), tt.want)
			}
			if b.AttrOr("class", "") != BadgeClass(tt.tone) {
				t.Errorf("tone of %q is not %s", tt.want, tt.tone)
			}
		})
	}
}

func TestRowTimes(t *testing.T) {
	tests := []struct {
		name      string
		started   *time.Time
		ready     *time.Time
		heartbeat *time.Time
		ttr       string
		ago       string
	}{
		{"ready after 1.5s", at(-time.Minute), at(-time.Minute + 1500*time.Millisecond), at(-3 * time.Second), "1.5s", "3.0s ago"},
		{"ready after 850ms", at(-time.Minute), at(-time.Minute + 850*time.Millisecond), at(-90 * time.Second), "850ms", "1m30s ago"},
		{"not ready", at(-time.Minute), nil, nil, "—", "—"},
		{"ready of an earlier boot", at(-time.Minute), at(-time.Hour), nil, "—", "—"},
		{"never started", nil, nil, nil, "—", "—"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := inst("vm", "Running", api.AgentConnected)
			i.StartedAt, i.ReadyAt, i.Agent.LastHeartbeat = tt.started, tt.ready, tt.heartbeat
			row := rowOf(t, i)
			if got := row.Find(`[data-testid="time-to-ready"]`).Text(); got != tt.ttr {
				t.Errorf("time to ready %q, want %q", got, tt.ttr)
			}
			hb := row.Find(`[data-testid="heartbeat"]`)
			if got := hb.Text(); got != tt.ago {
				t.Errorf("heartbeat %q, want %q", got, tt.ago)
			}
			if tt.heartbeat != nil && hb.AttrOr("datetime", "") != Stamp(tt.heartbeat) {
				t.Errorf("heartbeat datetime %q", hb.AttrOr("datetime", ""))
			}
		})
	}
}

func TestFilterForm(t *testing.T) {
	f := Filter{Status: "Running", Agent: "none", Backend: "qemu", Query: "web", Sort: "ready", Page: 2}
	doc := render(t, InstancesPage(InstancesData{Meta: Meta{Now: now, CSRF: "tok"}, Filter: f, Backends: []string{"sim", "qemu"}, Pages: 3}))
	for testid, want := range map[string]string{"filter-status": "Running", "filter-agent": "none", "filter-backend": "qemu", "filter-sort": "ready"} {
		sel := doc.Find(`[data-testid="` + testid + `"] option[selected]`)
		if sel.Length() != 1 || sel.AttrOr("value", "") != want {
			t.Errorf("%s: selected %q, want %q", testid, sel.AttrOr("value", ""), want)
		}
	}
	if got := doc.Find(`[data-testid="filter-q"]`).AttrOr("value", ""); got != "web" {
		t.Errorf("search box %q", got)
	}
	if got := doc.Find(`[data-testid="filter-status"] option[value="Running"]`).Text(); !strings.Contains(got, "Ready") {
		t.Errorf("the Running option %q does not say it includes Ready", got)
	}
	// The bulk form carries the filter back and the CSRF token.
	carried := map[string]string{}
	doc.Find(`[data-testid="bulk-form"] input[type="hidden"]`).Each(func(_ int, s *goquery.Selection) {
		carried[s.AttrOr("name", "")] = s.AttrOr("value", "")
	})
	for k, v := range map[string]string{"_csrf": "tok", "status": "Running", "agent": "none", "backend": "qemu", "q": "web", "sort": "ready", "page": "2"} {
		if carried[k] != v {
			t.Errorf("bulk form field %s = %q, want %q", k, carried[k], v)
		}
	}
	if n := doc.Find(`[data-testid="no-instances"]`).Length(); n != 1 {
		t.Error("an empty table says nothing")
	}
	if got := doc.Find(`form[data-testid="bulk-form"]`).AttrOr("method", ""); got != "post" {
		t.Errorf("bulk form method %q, want post (works without JavaScript)", got)
	}
}

func TestPager(t *testing.T) {
	tests := []struct {
		name       string
		page       int
		pages      int
		prev, next string
		shown      bool
	}{
		{"single page", 1, 1, "", "", false},
		{"first", 1, 3, "", "/instances?page=2&status=Ready", true},
		{"middle", 2, 3, "/instances?status=Ready", "/instances?page=3&status=Ready", true},
		{"last", 3, 3, "/instances?page=2&status=Ready", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := render(t, InstancesPage(InstancesData{Filter: Filter{Status: "Ready", Sort: "name", Page: tt.page}, Pages: tt.pages}))
			p := doc.Find(`[data-testid="pager"]`)
			if (p.Length() == 1) != tt.shown {
				t.Fatalf("pager shown=%v, want %v", p.Length() == 1, tt.shown)
			}
			if got := p.Find(`a[rel="prev"]`).AttrOr("href", ""); got != tt.prev {
				t.Errorf("prev %q, want %q", got, tt.prev)
			}
			if got := p.Find(`a[rel="next"]`).AttrOr("href", ""); got != tt.next {
				t.Errorf("next %q, want %q", got, tt.next)
			}
			if tt.shown && p.AttrOr("aria-label", "") == "" {
				t.Error("pager navigation has no label")
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	doc := render(t, Outcomes([]Outcome{{Name: "a", Action: "stop"}, {Name: "b", Action: "stop", Err: `stopping instance "b": conflict`}}))
	list := doc.Find(`[data-testid="outcomes"]`)
	if list.AttrOr("role", "") != "status" {
		t.Error("outcomes are not announced (role=status)")
	}
	a := list.Find(`[data-testid="outcome"][data-name="a"]`)
	b := list.Find(`[data-testid="outcome"][data-name="b"]`)
	if a.AttrOr("data-ok", "") != "true" || !strings.Contains(a.Text(), "stop a: done") {
		t.Errorf("a: %s %q", a.AttrOr("data-ok", ""), a.Text())
	}
	if b.AttrOr("data-ok", "") != "false" || !strings.Contains(b.Text(), `stopping instance "b": conflict`) {
		t.Errorf("b: %s %q", b.AttrOr("data-ok", ""), b.Text())
	}
	if render(t, Outcomes(nil)).Find(`[data-testid="outcomes"]`).Length() != 0 {
		t.Error("an empty outcome list is rendered")
	}
}

func TestAccessibleMarkup(t *testing.T) {
	i := inst("web1", "Ready", api.AgentConnected)
	pages := map[string]*goquery.Document{
		"instances": render(t, InstancesPage(InstancesData{Rows: []*api.Instance{i}, Pages: 1, Filter: Filter{Sort: "name", Page: 1}, Meta: Meta{Active: "instances", Who: "session/abcd1234"}})),
		"instance":  render(t, InstancePage(InstanceData{Inst: i, Meta: Meta{Active: "instances", Who: "session/abcd1234"}})),
		"overview":  render(t, OverviewPage(OverviewData{Meta: Meta{Active: "overview", Who: "session/abcd1234"}})),
	}
	for name, doc := range pages {
		t.Run(name, func(t *testing.T) {
			if doc.Find("html").AttrOr("lang", "") == "" {
				t.Error("no lang on <html>")
			}
			if doc.Find(`meta[name="color-scheme"]`).AttrOr("content", "") != "light dark" {
				t.Error("no color-scheme meta: the dark theme would not follow the system")
			}
			if doc.Find(`a[href="#main"]`).Length() != 1 || doc.Find("main#main").Length() != 1 {
				t.Error("no skip link to the main content")
			}
			if doc.Find(`nav[aria-label]`).Length() == 0 || doc.Find(`nav a[aria-current="page"]`).Length() != 1 {
				t.Error("navigation without a label or current page")
			}
			live := doc.Find(`[data-testid="live-indicator"]`)
			if live.AttrOr("role", "") != "status" || live.AttrOr("aria-live", "") != "polite" {
				t.Error("the live indicator is not announced")
			}
			if doc.Find("h1").Length() != 1 {
				t.Errorf("%d h1 headings, want 1", doc.Find("h1").Length())
			}
			doc.Find("input, select").Each(func(_ int, s *goquery.Selection) {
				if s.AttrOr("type", "") == "hidden" {
					return
				}
				if s.AttrOr("aria-label", "") == "" && s.ParentsFiltered("label").Length() == 0 {
					t.Errorf("unlabelled control %s name=%q", goquery.NodeName(s), s.AttrOr("name", ""))
				}
			})
			doc.Find("button").Each(func(_ int, s *goquery.Selection) {
				if strings.TrimSpace(s.Text()) == "" && s.AttrOr("aria-label", "") == "" {
					t.Errorf("button %q without a label", s.AttrOr("data-testid", ""))
				}
			})
			if doc.Find(`[data-testid="logout-form"] button`).Text() != "Log out" {
				t.Error("no Log out button for a signed-in session")
			}
			doc.Find("table").Each(func(_ int, s *goquery.Selection) {
				if s.Find("caption").Length() != 1 {
					t.Errorf("table %q without a caption", s.AttrOr("data-testid", ""))
				}
			})
			doc.Find("th").Each(func(_ int, s *goquery.Selection) {
				if s.AttrOr("scope", "") == "" {
					t.Errorf("header cell %q without scope", s.Text())
				}
			})
		})
	}
	sel := pages["instances"].Find(`[data-testid="select"]`)
	if sel.AttrOr("aria-label", "") != "Select web1" {
		t.Errorf("row checkbox label %q", sel.AttrOr("aria-label", ""))
	}
}

func TestLoginPage(t *testing.T) {
	tests := []struct {
		name string
		data LoginData
	}{
		{"plain", LoginData{}},
		{"error", LoginData{Error: "This login link does not work"}},
		{"notice", LoginData{Notice: "You are signed out."}},
		{"confirm", LoginData{Confirm: "tok123"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := render(t, LoginPage(tt.data))
			if doc.Find("html").AttrOr("lang", "") == "" || doc.Find(`meta[name="color-scheme"]`).AttrOr("content", "") != "light dark" {
				t.Error("no lang or color-scheme")
			}
			if doc.Find("h1").Length() != 1 || doc.Find("main").Length() != 1 {
				t.Error("want one h1 and a main")
			}
			if doc.Find("script").Length() != 0 {
				t.Error("the login page loads a script")
			}
			if doc.Find(`meta[name="referrer"]`).AttrOr("content", "") != "no-referrer" {
				t.Error("the login page may leak its token in a Referer")
			}
			if !strings.Contains(doc.Find(`[data-testid="login-command"]`).Text(), "guestlink dashboard") {
				t.Error("the page does not say how to get in")
			}
			if got := doc.Find(`[role="alert"][data-testid="login-error"]`).Text(); got != tt.data.Error {
				t.Errorf("error %q, want %q", got, tt.data.Error)
			}
			if got := doc.Find(`[role="status"][data-testid="login-notice"]`).Text(); got != tt.data.Notice {
				t.Errorf("notice %q, want %q", got, tt.data.Notice)
			}
			form := doc.Find(`form[data-testid="login-confirm"]`)
			if (form.Length() == 1) != (tt.data.Confirm != "") {
				t.Fatalf("confirmation form shown = %v", form.Length() == 1)
			}
			if tt.data.Confirm != "" && (form.AttrOr("method", "") != "get" || form.Find(`input[name="token"]`).AttrOr("value", "") != tt.data.Confirm || strings.TrimSpace(form.Find("button").Text()) == "") {
				t.Error("the confirmation form does not carry the token to GET /login with a labelled button")
			}
		})
	}
}

func TestLiveFragments(t *testing.T) {
	i := inst("web1", "Ready", api.AgentConnected)
	tests := []struct {
		name, sel, oob string
		c              templ.Component
	}{
		{"row", "tr#row-web1", "true", InstanceRow(i, Meta{}, true)},
		{"badges", "#badges-web1", "true", InstanceBadges(i, Meta{}, true)},
		{"timeline", `ol:has([data-testid="timeline-entry"])`, "afterbegin:#timeline-web1", TimelinePrepend("web1", TimelineItem{Kind: "ready", To: "true"})},
		{"activity", `ol:has([data-testid="activity-item"])`, "afterbegin:#activity-list", ActivityPrepend(Activity{ID: 3, Instance: "web1", Action: "ready"})},
		{"counts", "#status-counts", "true", Counts("status-counts", nil, true)},
		{"removed", "#row-web1", "delete", RowRemoved("web1")},
		{"added", "tbody", "beforeend:#instance-rows", RowAdded(i, Meta{})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.c.Render(context.Background(), &buf); err != nil {
				t.Fatal(err)
			}
			doc, _ := goquery.NewDocumentFromReader(strings.NewReader("<table>" + buf.String() + "</table>"))
			if got := doc.Find(tt.sel).First().AttrOr("hx-swap-oob", ""); got != tt.oob {
				t.Errorf("hx-swap-oob %q, want %q in %s", got, tt.oob, buf.String())
			}
		})
	}
	// Without oob the same components are plain markup.
	var buf bytes.Buffer
	_ = InstanceRow(i, Meta{}, false).Render(context.Background(), &buf)
	if strings.Contains(buf.String(), "hx-swap-oob") {
		t.Error("a page row carries hx-swap-oob")
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 instances", 1: "1 instance", 2: "2 instances", 10000: "10000 instances"} {
		t.Run(want, func(t *testing.T) {
			doc := render(t, InstancesPage(InstancesData{Total: n, Pages: 1, Filter: Filter{Sort: "name", Page: 1}}))
			if got := doc.Find(`[data-testid="total"]`).Text(); got != want {
				t.Errorf("total %q, want %q", got, want)
			}
		})
	}
}
