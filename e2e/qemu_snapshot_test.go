package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/link/ringproto"
)

// qemuGuestDir is where the daemon's QEMU plugin keeps a guest.
func qemuGuestDir(d *daemonProc, plugin, uuid string) string {
	return filepath.Join(d.stateDir, "plugins", plugin, uuid)
}

// TestQEMUSnapshotsAcrossRename runs the ring-buffer rename scenario with
// one real VM (two kernel boots): created on qemu-legacy and Ready, a
// stateful snapshot (the guest runs on), config changed, restore
// --stateful (Ready as saved, no boot, config back), a stateful stop, move
// to qemu (disk, saved state and snapshot kept), start of the legacy saved
// state refused (Stopped, start --stateless named), restore --stateful of
// the legacy snapshot refused before QEMU starts (both ports and the
// working command named, instance Stopped), snapshots kept across a
// daemon restart, then the stateless restore boots the qemu layout and
// reaches Ready with the snapshot's disk and config; deleting the
// snapshot and the instance removes their files. A qcow2 file made with
// qemu-img stands for the instance's disk (the busybox guest has none).
func TestQEMUSnapshotsAcrossRename(t *testing.T) {
	d, img := newQEMUDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), qemuTestTimeout)
	defer cancel()
	const name = "vm-rename"
	rec := d.record(name)
	cfg := qemuConfig(img, "", map[string]string{"user.x": "1"})
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "qemu-legacy", Config: cfg, Start: true}); err != nil {
		t.Fatalf("launching %s: %v", name, err)
	}
	inst := d.waitInstance(ctx, name, "Ready", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	legacyDir := qemuGuestDir(d, "qemu-legacy", inst.UUID)
	disk := filepath.Join(legacyDir, "root.qcow2")
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", disk, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	diskV1, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}

	// A stateful snapshot of the Ready guest; it runs on.
	mark := rec.mark()
	out := d.cli(ctx, "snapshot", "create", name, "before-upgrade", "--stateful")
	if !strings.Contains(out, "stateful") {
		t.Errorf("snapshot create printed %q", out)
	}
	rec.wait(ctx, mark, events.InstanceSnapshotCreated, 1, qemuOpTimeout)
	sn, err := d.client.Snapshot(ctx, name, "before-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Stateful || !sn.Ready || !sn.Running || sn.Details["layout"] != "legacy" || sn.Details["ring_port"] != ringproto.PortLegacy ||
		sn.StateSize <= 0 || sn.Size != int64(len(diskV1)) || sn.Backend != "qemu-legacy" {
		t.Errorf("snapshot %+v: want stateful, Ready, running, legacy layout, a state and the disk's %d bytes", sn, len(diskV1))
	}
	t.Logf("stateful snapshot: %d bytes of state, %d of disk", sn.StateSize, sn.Size)
	pid := qemuPID(t, inst.UUID)
	if now, err := d.client.Instance(ctx, name); err != nil || now.StatusCode != int(status.Ready) || pid == 0 {
		t.Fatalf("after the snapshot: %+v, %v, QEMU pid %d; want the same guest Ready", now, err, pid)
	}

	// Change the config and the disk, then restore with the state: config
	// and disk back, Ready as saved, without a kernel boot.
	if _, err := d.client.UpdateConfig(ctx, name, map[string]string{"user.x": "2"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(disk, []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	mark = rec.mark()
	st, err := d.client.Restore(ctx, name, api.InstancePut{Restore: "before-upgrade", Stateful: true})
	if err != nil {
		t.Fatalf("restore --stateful under the same layout: %v", err)
	}
	if !st.Ready || st.StatusCode != int(status.Ready) {
		t.Errorf("after restore --stateful: %s, ready %v; want Ready as saved", st.Status, st.Ready)
	}
	rec.wait(ctx, mark, events.InstanceSnapshotRestored, 1, qemuOpTimeout)
	inst, err = d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Config["user.x"] != "1" || inst.Boot != 2 {
		t.Errorf("after restore --stateful: user.x %q, boot %d; want 1 and the second start", inst.Config["user.x"], inst.Boot)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, diskV1) {
		t.Errorf("disk after restore: %d bytes %q..., want the snapshot's", len(got), got[:min(len(got), 16)])
	}
	restoredReady := false
	for _, ev := range rec.eventsSince(mark) {
		var lc api.EventLifecycle
		if json.Unmarshal(ev.Metadata, &lc) == nil && lc.Action == events.InstanceReady && lc.Context["restored"] == true {
			restoredReady = true
		}
	}
	if !restoredReady {
		t.Errorf("no instance-ready with restored=true after restore --stateful: %v", rec.since(mark))
	}
	d.waitInstance(ctx, name, "agent connected after the stateful restore", qemuOpTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected && i.StatusCode == int(status.Ready)
	})

	// Stop with the state, and move to the current layout.
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Stateful: true}); err != nil {
		t.Fatalf("stop --stateful: %v", err)
	}
	mark = rec.mark()
	out = d.cli(ctx, "move", name, "--backend", "qemu")
	if !strings.Contains(out, "moved to backend qemu") {
		t.Errorf("move printed %q", out)
	}
	rec.wait(ctx, mark, events.InstanceMoved, 1, qemuOpTimeout)
	currentDir := qemuGuestDir(d, "qemu", inst.UUID)
	if _, err := os.Stat(legacyDir); !os.IsNotExist(err) {
		t.Errorf("the legacy guest directory after the move: stat err %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(currentDir, "root.qcow2")); err != nil || !bytes.Equal(got, diskV1) {
		t.Errorf("disk after the move: %v", err)
	}

	// Today's start of the legacy saved state: refused, Stopped, the way out named.
	_, err = d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStart})
	t.Logf("start refused: %v", err)
	wantStatusError(t, "start of a legacy saved state on qemu", err, http.StatusConflict,
		ringproto.PortCurrent, ringproto.PortLegacy, "guestlink start --stateless "+name)
	inst, err = d.client.Instance(ctx, name)
	if err != nil || inst.StatusCode != int(status.Stopped) || qemuPID(t, inst.UUID) != 0 {
		t.Errorf("after the refused start: %v, %v; want Stopped and no QEMU", inst.Status, err)
	}

	// The stateful restore of the legacy snapshot: refused before QEMU starts.
	_, stderr, err := d.runCLI(ctx, "restore", name, "before-upgrade", "--stateful")
	if err == nil {
		t.Fatal("restore --stateful of a legacy-layout snapshot on qemu succeeded")
	}
	t.Logf("restore --stateful refused: %s", stderr)
	for _, want := range []string{ringproto.PortCurrent, ringproto.PortLegacy, "guestlink restore " + name + " before-upgrade` (without --stateful)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal %q does not name %q", stderr, want)
		}
	}
	inst, err = d.client.Instance(ctx, name)
	if err != nil || inst.StatusCode != int(status.Stopped) || inst.Backend != "qemu" || qemuPID(t, inst.UUID) != 0 {
		t.Errorf("after the refused restore: %+v, %v; want Stopped on qemu, no QEMU", inst, err)
	}

	// Snapshots survive a daemon restart.
	lastID := rec.lastID()
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d.start()
	rec = d.recordSince(name, lastID)
	list, err := d.client.Snapshots(ctx, name)
	if err != nil || len(list) != 1 || list[0].Name != "before-upgrade" || list[0].Details["layout"] != "legacy" {
		t.Fatalf("snapshots after the daemon restart: %+v, %v", list, err)
	}

	// The stateless restore boots the current layout and reaches Ready.
	mark = rec.mark()
	restored := time.Now()
	d.cli(ctx, "restore", name, "before-upgrade")
	inst = d.waitInstance(ctx, name, "Ready after the stateless restore", qemuBootTimeout, func(i *api.Instance) bool {
		return i.StatusCode == int(status.Ready) && i.Agent.State == api.AgentConnected
	})
	t.Logf("stateless restore on qemu: Ready %v after the command", time.Since(restored).Round(time.Millisecond))
	if inst.Backend != "qemu" || inst.Details["ring_port"] != ringproto.PortCurrent || inst.Config["user.x"] != "1" {
		t.Errorf("after the stateless restore: backend %s, ring port %s, user.x %q", inst.Backend, inst.Details["ring_port"], inst.Config["user.x"])
	}
	rec.wait(ctx, mark, events.InstanceReady, 1, qemuOpTimeout)

	// Delete the snapshot, then the instance: their files go.
	d.cli(ctx, "snapshot", "delete", name, "before-upgrade")
	if _, err := os.Stat(filepath.Join(currentDir, "snapshots", "before-upgrade")); !os.IsNotExist(err) {
		t.Errorf("snapshot files after delete: stat err %v", err)
	}
	d.cli(ctx, "snapshot", "create", name, "last")
	if err := d.client.Delete(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(currentDir); !os.IsNotExist(err) {
		t.Errorf("guest directory after deleting the instance: stat err %v", err)
	}
}
