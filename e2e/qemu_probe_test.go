package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
)

// TestQEMUExecProbe runs an exec readiness probe in a QEMU busybox guest:
// the agent declares Ready with the probe's reason, then withdraws it when
// the probe key changes live to a failing command.
func TestQEMUExecProbe(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	evs, _ := d.client.Events(ctx, client.EventFilter{Instances: []string{"vm-probe"}})
	cfg := qemuConfig(img, "", map[string]string{
		"readiness.probe.exec":   "true",
		"readiness.probe.period": "500ms",
	})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "vm-probe", Backend: "qemu", Config: cfg, Start: true}); err != nil {
		t.Fatal(err)
	}
	c := nextReady(t, evs, "Ready=True ProbeSucceeded", func(c api.Condition) bool { return c.Reason == "ProbeSucceeded" })
	if c.Status != api.ConditionTrue || c.Message != "exec true: ok" {
		t.Fatalf("probe success: %+v", c)
	}
	if _, err := d.client.UpdateConfig(ctx, "vm-probe", map[string]string{"readiness.probe.exec": "test -e /nonexistent"}, nil); err != nil {
		t.Fatal(err)
	}
	c = nextReady(t, evs, "Ready withdrawn", func(c api.Condition) bool { return c.Reason == "ProbeFailed" })
	if c.Status != api.ConditionFalse || !strings.HasPrefix(c.Message, "exec test -e /nonexistent: exit status 1") {
		t.Fatalf("probe failure: %+v", c)
	}
	w, err := d.client.Wait(ctx, "vm-probe", api.WaitReady, time.Second)
	if err != nil || w.Outcome != api.WaitTimeout {
		t.Fatalf("wait: %+v %v", w, err)
	}
}
