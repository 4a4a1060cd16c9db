package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// TestOOMCondition makes a real sim guest's console carry the kernel's OOM
// line (the one the issue's 256 MiB Debian boot printed), preceded by a
// 200 KiB line of binary garbage, and checks that the daemon keeps running
// and shows the kill: an instance-oom-kill event carrying the OutOfMemory
// condition, the condition in `guestlink info` with the process's name,
// and none after a restart (a new boot).
func TestOOMCondition(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	evs, errc := d.client.Events(ctx, client.EventFilter{Instances: []string{"oom1"}})
	g := d.launch(ctx, "oom1", map[string]string{"sim.command": sayCommand}, nil)

	g.say(t, strings.Repeat("\x00\xff\x1b[31m garbage", 20<<10))
	g.say(t, "[  189.345678] Out of memory: Killed process 1234 (localedef) total-vm:71544kB, anon-rss:59756kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:180kB oom_score_adj:0")
	var oom *api.Condition
	for oom == nil {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("event stream ended: %v", <-errc)
			}
			l, err := ev.Lifecycle()
			if err != nil || l.Action != "instance-oom-kill" {
				continue
			}
			if l.Context["process"] != "localedef" || l.Context["source"] != "console" {
				t.Fatalf("instance-oom-kill context %v", l.Context)
			}
			for _, c := range conditionsIn(t, ev) {
				if c.Type == "OutOfMemory" {
					oom = &c
				}
			}
			if oom == nil {
				t.Fatalf("the first instance-oom-kill carries no OutOfMemory condition: %v", l.Context)
			}
		case <-ctx.Done():
			t.Fatalf("no instance-oom-kill event; daemon log:\n%s", d.logTail(40))
		}
	}
	if oom.Status != api.ConditionTrue || oom.Reason != "OOMKilled" || !strings.Contains(oom.Message, "localedef (pid 1234)") {
		t.Fatalf("condition %+v", oom)
	}
	out := d.cli(ctx, "info", "oom1")
	if !strings.Contains(out, "OutOfMemory") || !strings.Contains(out, "OOMKilled") || !strings.Contains(out, "localedef (pid 1234)") {
		t.Fatalf("guestlink info shows no OOM kill:\n%s", out)
	}

	d.cli(ctx, "restart", "oom1")
	inst, err := d.client.Instance(ctx, "oom1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range inst.Conditions {
		if c.Type == "OutOfMemory" {
			t.Fatalf("after a restart: %+v", c)
		}
	}
}

// conditionsIn decodes the "conditions" of an event's context.
func conditionsIn(t *testing.T, ev api.Event) []api.Condition {
	t.Helper()
	var md struct {
		Context struct {
			Conditions []api.Condition `json:"conditions"`
		} `json:"context"`
	}
	if err := json.Unmarshal(ev.Metadata, &md); err != nil {
		t.Fatalf("event %s: %v", ev.Metadata, err)
	}
	return md.Context.Conditions
}
