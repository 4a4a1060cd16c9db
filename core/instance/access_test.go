package instance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/events"
)

// TestRecordGuestAccess records an exec and the three file operations and
// reads them back from the instance's timeline and its stored lifecycle
// events: who, the command (quoted where a word has spaces) or path, the
// exit code or the agent's status; an unknown action and instance are
// refused.
func TestRecordGuestAccess(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	seven := 7
	by := events.Requestor{Protocol: "bearer", Username: "ops"}
	for _, a := range []GuestAccess{
		{Action: events.InstanceExec, Command: []string{"sh", "-c", "echo out; exit 7"}, ExitCode: &seven},
		{Action: events.InstanceExec, Command: []string{"true"}, Err: "the agent gave no exit code"},
		{Action: events.InstanceFilePushed, Path: "/etc/motd", Status: 200},
		{Action: events.InstanceFileRetrieved, Path: "/nope", Status: 404},
		{Action: events.InstanceFileDeleted, Path: "/tmp/x", Status: 0, Err: "agent unreachable"},
	} {
		if err := e.m.RecordGuestAccess(bg, "web1", a, by); err != nil {
			t.Fatal(err)
		}
	}
	tl, err := e.m.Timeline(bg, "web1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range tl {
		if x.Kind == kindExec || x.Kind == kindFile {
			got = append(got, x.Kind+" "+x.To+" "+x.Detail)
		}
	}
	slices.Sort(got)
	want := []string{
		`exec exit 7 sh -c "echo out; exit 7" (by bearer ops)`,
		`exec failed true (by bearer ops): the agent gave no exit code`,
		`file failed /tmp/x (by bearer ops): agent unreachable`,
		`file pushed /etc/motd (by bearer ops)`,
		`file refused 404 /nope (by bearer ops)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	acts := e.actions("web1")
	for _, a := range []string{events.InstanceExec, events.InstanceFilePushed, events.InstanceFileRetrieved, events.InstanceFileDeleted} {
		if !slices.Contains(acts, a) {
			t.Errorf("no %s event stored: %q", a, acts)
		}
	}
	recs, err := e.store.EventsAfter(bg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		var body struct {
			Metadata events.Lifecycle `json:"metadata"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if lc := body.Metadata; lc.Action == events.InstanceExec && lc.Context["exit_code"] == float64(7) {
			if lc.Requestor == nil || lc.Requestor.Username != "ops" || len(lc.Context["command"].([]any)) != 3 {
				t.Errorf("instance-exec event: %+v", lc)
			}
		}
	}
	if err := e.m.RecordGuestAccess(bg, "web1", GuestAccess{Action: "instance-other"}, by); err == nil {
		t.Error("an unknown action was recorded")
	}
	if err := e.m.RecordGuestAccess(bg, "nosuch", GuestAccess{Action: events.InstanceExec}, by); err == nil {
		t.Error("an access to an unknown instance was recorded")
	}
}

// TestAccessTimelineFromEvent: the entry AccessTimeline makes from each
// stored exec and file event (its JSON, as a live view decodes it) is the
// entry RecordGuestAccess stored (kind, outcome, detail, cause and boot);
// tried: exit codes, a failed exec, pushed, refused and failed file
// operations, a long command cut, a unix requestor, and an action that is
// no access (false).
func TestAccessTimelineFromEvent(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	zero, seven := 0, 7
	long := strings.Repeat("x", maxAccessDetail+10)
	for _, x := range []struct {
		a  GuestAccess
		by events.Requestor
	}{
		{GuestAccess{Action: events.InstanceExec, Command: []string{"sh", "-c", "echo out; exit 7"}, ExitCode: &seven}, events.Requestor{Protocol: "bearer", Username: "ops"}},
		{GuestAccess{Action: events.InstanceExec, Command: []string{"echo", long}, ExitCode: &zero}, events.Requestor{Protocol: "unix", Username: "root", UID: "0"}},
		{GuestAccess{Action: events.InstanceExec, Command: []string{"true"}, Err: "the agent gave no exit code"}, events.Requestor{Protocol: "session", Username: "session/1a2b3c4d"}},
		{GuestAccess{Action: events.InstanceFilePushed, Path: "/etc/motd", Status: 200}, events.Requestor{Protocol: "tls", Username: "alice", Fingerprint: strings.Repeat("ab", 32)}},
		{GuestAccess{Action: events.InstanceFileRetrieved, Path: "/nope", Status: 404}, events.Requestor{Protocol: "bearer", Username: "ops"}},
		{GuestAccess{Action: events.InstanceFileDeleted, Path: "/tmp/x", Err: "agent unreachable"}, events.Requestor{}},
	} {
		if err := e.m.RecordGuestAccess(bg, "web1", x.a, x.by); err != nil {
			t.Fatal(err)
		}
	}
	tl, err := e.m.Timeline(bg, "web1", 0)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(x TimelineEntry) string {
		return fmt.Sprintf("boot %d %s %s by %q: %s", x.Boot, x.Kind, x.To, x.Cause, x.Detail)
	}
	var stored []string
	for _, x := range tl {
		if x.Kind == kindExec || x.Kind == kindFile {
			stored = append(stored, entry(x))
		}
	}
	recs, err := e.store.EventsAfter(bg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, r := range recs {
		var body struct {
			Metadata events.Lifecycle `json:"metadata"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		lc := body.Metadata
		x, ok := AccessTimeline(lc.Action, lc.Context, lc.Requestor)
		isAccess := strings.HasPrefix(lc.Action, "instance-exec") || strings.HasPrefix(lc.Action, "instance-file-")
		if ok != isAccess {
			t.Errorf("AccessTimeline(%q) = %v", lc.Action, ok)
		}
		if ok {
			live = append(live, entry(x))
		}
	}
	slices.Sort(stored)
	slices.Sort(live)
	if len(stored) != 6 || !slices.Equal(stored, live) {
		t.Errorf("from the events:\n%s\nstored:\n%s", strings.Join(live, "\n"), strings.Join(stored, "\n"))
	}
}
