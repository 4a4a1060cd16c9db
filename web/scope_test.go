package web

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// pageStream fetches a dashboard page from the server at url and returns
// the live stream URL it opens (its sse-connect) and the rows it shows.
func pageStream(t *testing.T, url, path string) (string, []string) {
	t.Helper()
	res, err := http.Get(url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	doc.Find(`[data-testid="instance-row"]`).Each(func(_ int, s *goquery.Selection) { rows = append(rows, s.AttrOr("data-name", "")) })
	connect := doc.Find("body").AttrOr("sse-connect", "")
	if connect == "" {
		t.Fatalf("GET %s: no sse-connect", path)
	}
	return connect, rows
}

// until returns the messages of the stream up to the first that carries
// an id of at least id (an update, or a heartbeat telling the page it
// passed over events it shows nothing of): everything the stream sent
// for the events up to id.
func (c *sseClient) until(t *testing.T, id int64) []sseMessage {
	t.Helper()
	var got []sseMessage
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				t.Fatalf("stream ended while waiting for id %d", id)
			}
			got = append(got, m)
			if n, err := strconv.ParseInt(m.ID, 10, 64); err == nil && n >= id {
				return got
			}
		case <-deadline:
			t.Fatalf("no message with id >= %d within 20s (got %d messages)", id, len(got))
		}
	}
}

// fragments lists what the updates among msgs patch: "row web1",
// "badges web1", "timeline web1", "activity web1", "added web1",
// "removed web1", in order.
func fragments(msgs []sseMessage) []string {
	var out []string
	for _, m := range msgs {
		if m.Event != "update" {
			continue
		}
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(m.Data))
		if err != nil {
			continue
		}
		// The parser keeps a template's content as its children.
		doc.Find(`[hx-swap-oob]`).Each(func(_ int, s *goquery.Selection) {
			oob, id := s.AttrOr("hx-swap-oob", ""), s.AttrOr("id", "")
			switch {
			case oob == "delete":
				out = append(out, "removed "+strings.TrimPrefix(id, "row-"))
			case oob == "beforeend:#instance-rows":
				out = append(out, "added "+s.Find(`[data-testid="instance-row"]`).AttrOr("data-name", "?"))
			case oob == "afterbegin:#activity-list":
				out = append(out, "activity "+strings.TrimPrefix(s.Find("a").AttrOr("href", "?"), "/instances/"))
			case strings.HasPrefix(oob, "afterbegin:#timeline-"):
				out = append(out, "timeline "+strings.TrimPrefix(oob, "afterbegin:#timeline-"))
			case strings.HasPrefix(id, "row-"):
				out = append(out, "row "+strings.TrimPrefix(id, "row-"))
			case strings.HasPrefix(id, "badges-"):
				out = append(out, "badges "+strings.TrimPrefix(id, "badges-"))
			default:
				out = append(out, "other "+oob+" "+id)
			}
		})
	}
	return out
}

func named(msgs []sseMessage, name string) int {
	n := 0
	for _, m := range msgs {
		if m.Event == name {
			n++
		}
	}
	return n
}

// TestStreamScopes: each page's stream, opened as the page opens it (its
// sse-connect), carries what that page shows and nothing of an instance it
// does not show. Six instances g0..g5, three rows a list page; streams of
// the list's first and second page, g4's instance page, the overview, a
// page without live parts (view=none) and a stream without view= (all).
// Tried: a Ready of every instance; a created instance (appended to every
// list page, then patched there) and its deletion; the deletion of a row
// of the first page only; a list page's replay from the store; a list
// page whose rows key is unknown (listed again from its filter).
func TestStreamScopes(t *testing.T) {
	noLeaks(t)
	var list []*instance.Instance
	for i := range 6 {
		list = append(list, running(fmt.Sprintf("g%d", i), instance.AgentConnected))
	}
	inst := newFakeInstances(list...)
	ev := newBusEvents()
	app, d := newTestApp(inst, ev, Config{Heartbeat: 50 * time.Millisecond, PageSize: 3})
	url := server(t, app, d)

	first, rows1 := pageStream(t, url, "/instances")
	second, rows2 := pageStream(t, url, "/instances?page=2")
	one, _ := pageStream(t, url, "/instances/g4")
	over, _ := pageStream(t, url, "/")
	if !slices.Equal(rows1, []string{"g0", "g1", "g2"}) || !slices.Equal(rows2, []string{"g3", "g4", "g5"}) {
		t.Fatalf("list pages show %v and %v, want g0-g2 and g3-g5", rows1, rows2)
	}
	for _, u := range []string{first, second} {
		if !strings.Contains(u, "view=instances") || !strings.Contains(u, "rows=") {
			t.Errorf("list page's stream %q: want view=instances&rows=", u)
		}
	}
	if !strings.Contains(second, "page=2") {
		t.Errorf("second page's stream %q lacks its page (the fallback when rows= is unknown)", second)
	}
	if !strings.HasSuffix(one, "view=instance") || !strings.Contains(one, "name=g4") {
		t.Errorf("instance page's stream %q, want view=instance&name=g4", one)
	}
	streams := map[string]*sseClient{
		"first":    openStream(t, url+first, nil),
		"second":   openStream(t, url+second, nil),
		"instance": openStream(t, url+one, nil),
		"overview": openStream(t, url+over, nil),
		"none":     openStream(t, url+"/events?view=none", nil),
		"all":      openStream(t, url+"/events", nil),
	}
	waitStreams(t, d, int64(len(streams)))
	check := func(step string, last int64, want map[string][]string) {
		t.Helper()
		for name, c := range streams {
			got := fragments(c.until(t, last))
			if !slices.Equal(got, want[name]) {
				t.Errorf("%s: %s stream patched %q, want %q", step, name, got, want[name])
			}
		}
	}

	var pub events.Event
	var everyone []string
	for i := range 6 {
		name := fmt.Sprintf("g%d", i)
		inst.put(ready(name, time.Minute, time.Second))
		pub = ev.publish(t, events.InstanceReady, name, nil, nil)
		everyone = append(everyone, "row "+name, "badges "+name, "timeline "+name, "activity "+name)
	}
	check("Ready of every instance", pub.ID, map[string][]string{
		"first":    {"row g0", "row g1", "row g2"},
		"second":   {"row g3", "row g4", "row g5"},
		"instance": {"badges g4", "timeline g4"},
		"overview": {"activity g0", "activity g1", "activity g2", "activity g3", "activity g4", "activity g5"},
		"none":     nil,
		"all":      everyone,
	})
	// The overview's tiles (and the unscoped stream's) still follow.
	for _, name := range []string{"overview", "all"} {
		if m := streams[name].next(t, "counts"); !strings.Contains(m.Data, `id="status-counts"`) {
			t.Errorf("%s stream's counts: %q", name, m.Data)
		}
	}

	// A created instance joins every list page (as the table always
	// appended it), whose later updates then patch its row there; its
	// deletion removes the row; after that it is no list's.
	inst.put(stopped("g9", "sim"))
	ev.publish(t, events.InstanceCreated, "g9", nil, nil)
	inst.put(running("g9", instance.AgentStarted))
	ev.publish(t, events.InstanceStarted, "g9", nil, nil)
	pub = ev.publish(t, events.InstanceDeleted, "g9", nil, nil)
	check("created, started, deleted", pub.ID, map[string][]string{
		"first":    {"added g9", "row g9", "removed g9"},
		"second":   {"added g9", "row g9", "removed g9"},
		"instance": nil,
		"overview": {"activity g9", "activity g9", "activity g9"},
		"none":     nil,
		"all":      {"added g9", "activity g9", "row g9", "badges g9", "timeline g9", "activity g9", "removed g9", "activity g9"},
	})
	inst.put(running("g9", instance.AgentStarted))
	pub = ev.publish(t, events.InstanceStopped, "g9", nil, nil)
	check("an event of the deleted row's name", pub.ID, map[string][]string{
		"first":    nil,
		"second":   nil,
		"instance": nil,
		"overview": {"activity g9"},
		"none":     nil,
		"all":      {"row g9", "badges g9", "timeline g9", "activity g9"},
	})
	// A deleted row of the first page: the first page only.
	pub = ev.publish(t, events.InstanceDeleted, "g1", nil, nil)
	check("g1 deleted", pub.ID, map[string][]string{
		"first":    {"removed g1"},
		"second":   nil,
		"instance": nil,
		"overview": {"activity g1"},
		"none":     nil,
		"all":      {"removed g1", "activity g1"},
	})

	// A list page resuming from the store gets what it got live: its own
	// rows' events, the created instance's; one whose rows key is unknown
	// lists its page again from the filter.
	replayed := openStream(t, url+strings.Replace(second, "since=", "since=1&was=", 1), nil)
	if got, want := fragments(replayed.until(t, pub.ID)), []string{"row g3", "row g4", "row g5", "added g9", "row g9", "removed g9"}; !slices.Equal(got, want) {
		t.Errorf("second page's replay patched %q, want %q", got, want)
	}
	relisted := openStream(t, url+"/events?view=instances&rows=0000000000000000&page=2", nil)
	waitStreams(t, d, int64(len(streams)+2))
	ev.publish(t, events.InstanceAgentLost, "g0", nil, nil)
	pub = ev.publish(t, events.InstanceAgentLost, "g5", nil, nil)
	if got, want := fragments(relisted.until(t, pub.ID)), []string{"row g5"}; !slices.Equal(got, want) {
		t.Errorf("second page listed again from its filter patched %q, want %q", got, want)
	}
	for _, c := range streams {
		c.cancel()
	}
	replayed.cancel()
	relisted.cancel()
	waitStreams(t, d, 0)
}

// TestStreamBadScope: a stream's view= parameters are checked before it
// opens; a bad one is a 400 saying what is wrong.
func TestStreamBadScope(t *testing.T) {
	app, _ := newTestApp(newFakeInstances(), newBusEvents(), Config{})
	tests := []struct{ name, query, want string }{
		{"unknown view", "?view=images", `unknown live stream view "images"`},
		{"instance without name", "?view=instance", "want name=<instance>"},
		{"instance name too long", "?view=instance&name=" + strings.Repeat("a", maxQuery+1), "want name=<instance>"},
		{"list with a bad filter", "?view=instances&rows=x&status=Bogus", `unknown status filter "Bogus"`},
		{"list with a bad page", "?view=instances&page=0", `invalid page "0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body, _ := do(t, app, httptest.NewRequest(http.MethodGet, "/events"+tt.query, nil))
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("%d %q, want 400 saying %q", res.StatusCode, body, tt.want)
			}
		})
	}
}

// TestScopeRowsNewestChangeWins: a list page's rows follow creations and
// deletions in id order even when a replay reads older ones after the hub
// applied newer ones (the replay and the live events run side by side).
// Tried: an old deletion after a newer creation, an old creation after a
// newer deletion, and events of rows in between.
func TestScopeRowsNewestChangeWins(t *testing.T) {
	s := &streamScope{kind: scopeInstances, rows: map[string]struct{}{"a": {}}}
	steps := []struct {
		id           int64
		name, action string
		want         bool
	}{
		{20, "n", events.InstanceCreated, true},  // live: joins
		{10, "n", events.InstanceDeleted, false}, // replayed, older: ignored
		{21, "n", events.InstanceReady, true},    // still shown
		{30, "a", events.InstanceDeleted, true},  // live: the row's removal
		{5, "a", events.InstanceCreated, false},  // replayed, older: ignored
		{31, "a", events.InstanceReady, false},   // no longer shown
		{2, "z", events.InstanceReady, false},    // never shown
	}
	for _, st := range steps {
		if got := s.wants(st.id, st.name, st.action); got != st.want {
			t.Errorf("event %d (%s of %s): wanted %v, want %v", st.id, st.action, st.name, got, st.want)
		}
	}
}
