package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestSimSnapshotConsistency takes snapshots of a running sim guest whose
// agent is CONNECTED through the real daemon, CLI and agent. A sim guest's
// root is a host directory, so its agent refuses to freeze (it must never
// freeze a host filesystem): every snapshot is crash-consistent and says
// why, never failing for it. It also tries --no-freeze, freeze switched off
// in the guest, a stopped instance, the list's CONSISTENCY column and the
// daemon's audit line.
func TestSimSnapshotConsistency(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "freezesim"
	g := d.launch(ctx, name, nil, nil)

	out := d.cli(ctx, "snapshot", "create", name, "sim")
	if !strings.Contains(out, "consistency crash") || !strings.Contains(out, "simulated guest") {
		t.Errorf("snapshot create on a sim guest printed %q; want crash-consistent, saying the agent cannot freeze a simulated guest", out)
	}
	sn, err := d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "nofreeze", NoFreeze: true})
	if err != nil || sn.Consistency != "crash" || !strings.Contains(sn.ConsistencyDetail, "--no-freeze") {
		t.Errorf("--no-freeze: %+v, %v; want crash, saying --no-freeze", sn, err)
	}
	out = d.cli(ctx, "snapshot", "create", name, "nofreeze-cli", "--no-freeze")
	if !strings.Contains(out, "consistency crash: not frozen: --no-freeze") {
		t.Errorf("snapshot create --no-freeze printed %q", out)
	}

	// The guest's admin switches freeze off: the agent answers 403, the
	// snapshot is taken all the same and names the switch.
	if err := os.MkdirAll(filepath.Join(g.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.root, "etc/guestlink-agent.yaml"), []byte("features:\n  freeze: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sn, err = d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "off"})
	if err != nil || sn.Consistency != "crash" || !strings.Contains(sn.ConsistencyDetail, "switched off") {
		t.Errorf("freeze switched off: %+v, %v; want crash, saying it is switched off", sn, err)
	}

	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatal(err)
	}
	sn, err = d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "stopped"})
	if err != nil || sn.Consistency != "stopped" {
		t.Errorf("snapshot of a stopped instance: %+v, %v; want stopped", sn, err)
	}

	out = d.cli(ctx, "snapshot", "list", name)
	want := map[string]string{"sim": "crash", "nofreeze": "crash", "off": "crash", "stopped": "stopped"}
	if !strings.Contains(out, "CONSISTENCY") {
		t.Errorf("snapshot list has no CONSISTENCY column:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		if c, ok := want[f[0]]; ok {
			// NAME, TAKEN (date time), STATEFUL, READY, CONSISTENCY
			if f[5] != c {
				t.Errorf("snapshot list: %s has consistency %q, want %q:\n%s", f[0], f[5], c, out)
			}
			delete(want, f[0])
		}
	}
	if len(want) != 0 {
		t.Errorf("snapshot list lacks %v:\n%s", want, out)
	}
	log := d.log()
	for _, w := range []string{`msg="snapshot consistency"`, `instance=` + name, `consistency=crash`, `identity="unix `} {
		if !strings.Contains(log, w) {
			t.Errorf("daemon log lacks %s", w)
		}
	}
}
