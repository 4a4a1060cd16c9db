package web

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// profileEditor is the forms' fake editor with profiles to list; it keeps
// the profiles of every create it is asked for.
type profileEditor struct {
	*fakeEditor
	profiles []*instance.Profile
	mu       sync.Mutex
	asked    [][]string // CreateRequest.Profiles of each create, nil kept
}

func (p *profileEditor) Profiles(context.Context) ([]*instance.Profile, error) {
	return p.profiles, nil
}

func (p *profileEditor) Create(ctx context.Context, req instance.CreateRequest, by events.Requestor) (*instance.Instance, error) {
	p.mu.Lock()
	p.asked = append(p.asked, req.Profiles)
	p.mu.Unlock()
	return p.fakeEditor.Create(ctx, req, by)
}

func (p *profileEditor) last(t *testing.T) []string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.asked) == 0 {
		t.Fatal("no create was asked for")
	}
	return p.asked[len(p.asked)-1]
}

// TestLaunchFormProfiles: the launch form offers the daemon's profiles,
// the default first and checked; what is checked is sent in the order
// listed whatever order the browser posts it in; none checked is none (an
// empty list, not the default); a form without the field (an old page)
// leaves the default to the service; an unknown profile is refused beside
// the field; a daemon without profiles shows no field.
func TestLaunchFormProfiles(t *testing.T) {
	inst := newFakeInstances()
	ed := &profileEditor{fakeEditor: &fakeEditor{inst: inst}, profiles: []*instance.Profile{
		{Name: "web", Description: "web tier"}, {Name: "default", Description: "root disk and NIC"}, {Name: "big"},
	}}
	app, _ := newTestApp(inst, newBusEvents(), Config{Editor: ed, DefaultBackend: "sim", Backends: fakeBackends{{Name: "sim"}}})
	s := openSession(t, app)

	res, _, doc := get(t, app, "/launch")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /launch: %d", res.StatusCode)
	}
	var names, checked []string
	for _, n := range doc.Find(`[data-testid="launch-profile"]`).Nodes {
		var name string
		on := false
		for _, a := range n.Attr {
			switch a.Key {
			case "value":
				name = a.Val
			case "checked":
				on = true
			}
		}
		names = append(names, name)
		if on {
			checked = append(checked, name)
		}
	}
	if strings.Join(names, ",") != "default,big,web" || strings.Join(checked, ",") != "default" {
		t.Fatalf("profiles offered %v, checked %v; want default,big,web with default checked", names, checked)
	}
	if got := doc.Find(`label[for="launch-profile-web"]`).Text(); !strings.Contains(got, "web tier") {
		t.Errorf("web's label %q lacks its description", got)
	}

	tests := []struct {
		name  string
		form  url.Values
		code  int
		want  []string
		isNil bool
	}{
		{"posted out of order", url.Values{"profiles_shown": {"1"}, "profile": {"web", "default"}}, http.StatusSeeOther, []string{"default", "web"}, false},
		{"none checked", url.Values{"profiles_shown": {"1"}}, http.StatusSeeOther, []string{}, false},
		{"no field", url.Values{}, http.StatusSeeOther, nil, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			form := tt.form
			form.Set("name", "p"+string(rune('a'+i)))
			form.Set("backend", "sim")
			form.Set("_csrf", s.token)
			res, body, _ := do(t, app, post("/launch", form, s, nil))
			if res.StatusCode != tt.code {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			got := ed.last(t)
			if (got == nil) != tt.isNil || !slices.Equal(got, tt.want) {
				t.Fatalf("profiles asked %#v, want %#v", got, tt.want)
			}
		})
	}

	// An unknown profile is refused beside the field, and what was
	// checked stays checked.
	form := url.Values{"name": {"px"}, "backend": {"sim"}, "profiles_shown": {"1"}, "profile": {"big", "nope"}, "_csrf": {s.token}}
	before := len(ed.asked)
	res, body, doc := do(t, app, post("/launch", form, s, nil))
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("unknown profile: status %d: %s", res.StatusCode, body)
	}
	if got := doc.Find(`#launch-profiles-error`).Text(); !strings.Contains(got, `unknown profile "nope"`) {
		t.Errorf("profiles error %q", got)
	}
	if _, on := doc.Find(`#launch-profile-big`).Attr("checked"); !on {
		t.Error("big is no longer checked after the refused post")
	}
	if len(ed.asked) != before {
		t.Error("a create was asked for with an unknown profile")
	}

	// A daemon whose editor has no profiles shows no field.
	app2, _ := newTestApp(inst, newBusEvents(), Config{Editor: &fakeEditor{inst: inst}, DefaultBackend: "sim", Backends: fakeBackends{{Name: "sim"}}})
	if _, _, doc := get(t, app2, "/launch"); doc.Find(`[data-testid="launch-profiles"]`).Length() != 0 {
		t.Error("a profiles field without profiles to offer")
	}
}

// TestInstancePageProfiles: the instance page lists its profiles in order,
// and a dash for none.
func TestInstancePageProfiles(t *testing.T) {
	a := ready("web1", time.Minute, time.Second)
	a.Profiles = []string{"default", "web"}
	b := ready("bare", time.Minute, time.Second)
	b.Profiles = []string{}
	app, _ := newTestApp(newFakeInstances(a, b), newBusEvents(), Config{})
	for name, want := range map[string]string{"web1": "default, web", "bare": "—"} {
		_, _, doc := get(t, app, "/instances/"+name)
		if got := strings.TrimSpace(doc.Find(`[data-testid="profiles"]`).Text()); got != want {
			t.Errorf("%s: profiles shown %q, want %q", name, got, want)
		}
	}
}
