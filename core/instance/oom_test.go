package instance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
)

// TestOOMCondition reports kills from the console and the agent's counter
// and checks the OutOfMemory condition and the events: absent before a
// kill, the console's name and time, the agent's counter neither counting
// a kill the console showed twice nor going back, gone with the boot.
func TestOOMCondition(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.ReportOOMKill(bg, inst.UUID, OOMKill{Process: "x", Source: OOMSourceConsole}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a kill reported of a stopped instance: %v, want a conflict", err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.get("web1").Conditions {
		if c.Type == CondOutOfMemory {
			t.Fatalf("a guest with no kill lists %+v", c)
		}
	}
	sub, err := e.bus.Subscribe(events.Filter{Instances: []string{"web1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	at := time.Date(2026, 11, 28, 1, 2, 3, 0, time.UTC)
	steps := []struct {
		name    string
		do      func() error
		event   []string // what the event carries; nil: no event
		message string
	}{
		{"console kill", func() error {
			return e.m.ReportOOMKill(bg, inst.UUID, OOMKill{Process: "localedef", PID: 123, Time: at, Source: OOMSourceConsole})
		}, []string{`"action":"instance-oom-kill"`, `"process":"localedef"`, `"pid":123`, `"kills":1`, `"type":"OutOfMemory","status":"True","reason":"OOMKilled"`},
			"the guest's kernel killed localedef (pid 123) for want of memory at 2026-11-28T01:02:03Z (console); 1 kill this boot"},
		{"the agent's counter for the same kill", func() error { return e.m.ReportOOMCounter(bg, inst.UUID, 1) }, nil,
			"the guest's kernel killed localedef (pid 123) for want of memory at 2026-11-28T01:02:03Z (console); 1 kill this boot"},
		{"the agent's counter for a kill the console missed", func() error { return e.m.ReportOOMCounter(bg, inst.UUID, 3) },
			[]string{`"source":"agent"`, `"kills":3`},
			"the guest's kernel killed localedef (pid 123) for want of memory at "},
		{"a lower counter", func() error { return e.m.ReportOOMCounter(bg, inst.UUID, 2) }, nil, "; 3 kills this boot"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			if c := cond(t, e.get("web1"), CondOutOfMemory); c.Status != CondTrue || c.Reason != ReasonOOMKilled || !strings.Contains(c.Message, s.message) {
				t.Errorf("condition %+v, want the message to hold %q", c, s.message)
			}
			select {
			case ev := <-sub.C():
				for _, w := range s.event {
					if !strings.Contains(string(ev.Metadata), w) {
						t.Errorf("event %s: want %s", ev.Metadata, w)
					}
				}
				if s.event == nil {
					t.Errorf("unexpected event %s", ev.Metadata)
				}
			default:
				if s.event != nil {
					t.Errorf("no event") // published before Report returned
				}
			}
		})
	}
	if err := e.m.Stop(bg, "web1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.get("web1").Conditions {
		if c.Type == CondOutOfMemory {
			t.Fatalf("a new boot lists the last boot's kills: %+v", c)
		}
	}
}
