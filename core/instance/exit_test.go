package instance

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// TestGuestExit checks how the end of a guest's process shows: Stopped
// when the guest powered itself off, whatever detail the exit carries (the
// sim's "exit status 0 (guest)", QEMU's "guest-shutdown"), and for an exit
// the backend did not classify (an older plugin); Error when it crashed,
// with its detail as the instance's error or a default one. The
// instance-stopped event says which ("exit") and keeps the detail.
func TestGuestExit(t *testing.T) {
	tests := []struct {
		name      string
		ev        contract.Event
		status    string
		err       string // Details["error"]
		exit      string // the event's context
		timeline  string // the state entry's detail
		ctxDetail string // the event's "detail" or "error"
	}{
		{"poweroff", contract.Event{Exit: contract.ExitPoweroff}, "Stopped", "", "poweroff", "guest powered off", ""},
		{"poweroff with a detail", contract.Event{Exit: contract.ExitPoweroff, Detail: "exit status 0 (guest)"},
			"Stopped", "", "poweroff", "guest powered off: exit status 0 (guest)", "exit status 0 (guest)"},
		{"unclassified with a detail", contract.Event{Detail: "process ended"},
			"Stopped", "", "poweroff", "guest powered off: process ended", "process ended"},
		{"crash", contract.Event{Exit: contract.ExitCrash}, "Error", "the guest crashed", "crash", "the guest crashed", "the guest crashed"},
		{"crash with a detail", contract.Event{Exit: contract.ExitCrash, Detail: "signal: killed (guest)"},
			"Error", "signal: killed (guest)", "crash", "guest crashed: signal: killed (guest)", "signal: killed (guest)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			inst := e.create("web1", nil)
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatal(err)
			}
			e.be.kill(inst.UUID) // the process ended, then the backend says so
			ev := tt.ev
			ev.UUID, ev.Kind, ev.Time = inst.UUID, contract.EventExited, time.Now()
			e.m.HandleBackendEvent("fake", ev)
			got := e.get("web1")
			if got.Status != tt.status || got.Details["error"] != tt.err {
				t.Errorf("after the exit: status %s, details %v; want %s, error %q", got.Status, got.Details, tt.status, tt.err)
			}
			tl, err := e.m.Timeline(context.Background(), "web1", 0)
			if err != nil {
				t.Fatal(err)
			}
			if last := tl[len(tl)-1]; last.Kind != kindState || last.Cause != "backend" || last.Detail != tt.timeline {
				t.Errorf("last timeline entry %+v, want state by backend %q", last, tt.timeline)
			}
			l := lastLifecycle(t, e, "web1")
			if l.Action != events.InstanceStopped || l.Context["exit"] != tt.exit {
				t.Fatalf("last event %s %v, want %s with exit %q", l.Action, l.Context, events.InstanceStopped, tt.exit)
			}
			key := "detail"
			if tt.status == "Error" {
				key = "error"
			}
			if d, _ := l.Context[key].(string); d != tt.ctxDetail {
				t.Errorf("event's %s %q, want %q", key, d, tt.ctxDetail)
			}
			// Either way the instance starts again.
			if err := e.m.Start(bg, "web1", adminCaller); err != nil {
				t.Fatalf("starting again: %v", err)
			}
		})
	}
}

// lastLifecycle returns the last lifecycle event stored for an instance.
func lastLifecycle(t *testing.T, e *env, name string) events.Lifecycle {
	t.Helper()
	recs, err := e.store.EventsAfter(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Instance != name {
			continue
		}
		var body struct {
			Metadata events.Lifecycle `json:"metadata"`
		}
		if err := json.Unmarshal(recs[i].Body, &body); err != nil {
			t.Fatal(err)
		}
		return body.Metadata
	}
	t.Fatalf("no event of %s", name)
	return events.Lifecycle{}
}
