package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/instance"
)

// TestRecoveryServesWhileItWorks restarts a daemon on a state directory of
// 24 instances (4 running sim guests) with one guest's VMM stopped
// (SIGSTOP): the recovery of that guest waits on its control socket, the
// explicit hold, while the new daemon must already answer GET /1.0 (with
// how many instances it has not yet recovered) and GET /1.0/instances
// (every instance, the held one Unknown with the recovering reason). Once
// the VMM continues (SIGCONT), the recovery ends and the guest is Running.
// The hold lasts at most the sim VMM's control timeout (10 s, after which
// the recovery gives up on the guest): the daemon answers well before.
func TestRecoveryServesWhileItWorks(t *testing.T) {
	const total, running = 24, 4
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range total {
		name := fmt.Sprintf("r%02d", i)
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim", Start: i < running}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := d.client.Instance(ctx, "r00")
	if err != nil {
		t.Fatal(err)
	}
	if held.Status != "Running" && held.Status != "Ready" {
		t.Fatalf("r00 is %s after its start", held.Status)
	}
	pid := vmmPID(t, held.Details["guest_dir"])
	if err := d.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatal(err)
	}

	// The hold: r00's VMM answers nothing until SIGCONT.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	d.startAnswering()

	info, err := d.client.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("GET /1.0 during the recovery: %v", err)
	}
	if info.Environment.Recovering < 1 {
		t.Fatalf("GET /1.0 says %d instances are being recovered, want at least r00", info.Environment.Recovering)
	}
	list, err := d.client.Instances(ctx, client.InstanceFilter{})
	if err != nil {
		t.Fatalf("GET /1.0/instances during the recovery: %v", err)
	}
	if len(list) != total {
		t.Fatalf("%d instances listed during the recovery, want %d", len(list), total)
	}
	for _, inst := range list {
		if inst.Name == "r00" && (inst.Status != instance.StatusUnknown || inst.StatusCode != 0 || inst.StatusReason != instance.ReasonRecovering) {
			t.Fatalf("r00 during its recovery: status %q (%d), reason %q; want Unknown (0), %q",
				inst.Status, inst.StatusCode, inst.StatusReason, instance.ReasonRecovering)
		}
	}
	names, err := d.client.InstanceNames(ctx, client.InstanceFilter{})
	if err != nil || len(names) != total {
		t.Fatalf("URL list during the recovery: %v, %d names", err, len(names))
	}

	// Release the hold: the recovery ends, r00 is Running again.
	cont()
	for {
		info, err := d.client.ServerInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Environment.Recovering == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the recovery did not end after SIGCONT: %d left", info.Environment.Recovering)
		case <-time.After(50 * time.Millisecond):
		}
	}
	got, err := d.client.Instance(ctx, "r00")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "Running" && got.Status != "Ready" || got.StatusReason != "" {
		t.Fatalf("r00 after its recovery: %s (%q), want Running", got.Status, got.StatusReason)
	}
	if log := d.log(); !strings.Contains(log, "instances loaded") || !strings.Contains(log, "instances recovered") {
		t.Fatalf("the daemon's log lacks the recovery's lines:\n%s", d.logTail(logTailLines))
	}
}
