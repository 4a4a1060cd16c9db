package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
)

// wantStatusError checks that err is an API error with code whose message
// contains every one of parts.
func wantStatusError(t *testing.T, what string, err error, code int, parts ...string) {
	t.Helper()
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != code {
		t.Errorf("%s: err = %v, want HTTP %d", what, err, code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(se.Message, p) {
			t.Errorf("%s: message %q does not contain %q", what, se.Message, p)
		}
	}
}

// TestSimSnapshots runs stateless snapshots end to end on the embedded
// default backend (sim): create through the CLI, the refusals (duplicate,
// bad name, stateful on a backend without it, restore --stateful of a
// stateless snapshot, move of a running instance), rename, restore of a
// snapshot of a running guest (config back, booted afresh, Ready cleared
// until declared), snapshots surviving a daemon restart, delete removing
// the files, and deleting the instance removing the rest.
func TestSimSnapshots(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "snapsim"
	rec := d.record(name)
	g := d.launch(ctx, name, map[string]string{"user.x": "1"}, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })

	mark := rec.mark()
	out := d.cli(ctx, "snapshot", "create", name, "s0")
	if !strings.Contains(out, "Snapshot s0 of "+name+" created (stateless, consistency crash: ") {
		t.Errorf("snapshot create printed %q", out)
	}
	rec.wait(ctx, mark, events.InstanceSnapshotCreated, 1, opTimeout)
	snapDir := filepath.Join(g.dir, "snapshots")
	if _, err := os.Stat(filepath.Join(snapDir, "s0")); err != nil {
		t.Errorf("snapshot files: %v", err)
	}

	// Refusals, each precise.
	_, err := d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "s0"})
	wantStatusError(t, "duplicate", err, http.StatusConflict, "s0", "exists")
	for _, bad := range []string{"a/b", "..", "with space", ".hidden", strings.Repeat("x", 64)} {
		_, err := d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: bad})
		wantStatusError(t, "name "+bad, err, http.StatusBadRequest, "snapshot name")
	}
	_, err = d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "s9", Stateful: true})
	wantStatusError(t, "stateful on sim", err, http.StatusNotImplemented, "backend sim cannot take stateful snapshots")
	_, err = d.client.CreateSnapshot(ctx, "nosuch", api.InstanceSnapshotsPost{Name: "s0"})
	wantStatusError(t, "unknown instance", err, http.StatusNotFound)
	_, err = d.client.Move(ctx, name, "nosuch")
	wantStatusError(t, "move to an unknown backend", err, http.StatusBadRequest, "unknown backend")
	_, _, err = d.runCLI(ctx, "restore", name, "s0", "--stateful")
	if err == nil {
		t.Error("restore --stateful of a stateless snapshot succeeded")
	}
	_, err = d.client.Restore(ctx, name, api.InstancePut{Restore: "s0", Stateful: true})
	wantStatusError(t, "restore --stateful of a stateless snapshot", err, http.StatusConflict,
		"no memory state", "guestlink restore "+name+" s0")
	_, err = d.client.Restore(ctx, name, api.InstancePut{Restore: "nosuch"})
	wantStatusError(t, "restore of an unknown snapshot", err, http.StatusNotFound)

	// Rename.
	mark = rec.mark()
	d.cli(ctx, "snapshot", "rename", name, "s0", "s1")
	rec.wait(ctx, mark, events.InstanceSnapshotRenamed, 1, opTimeout)
	if _, err := os.Stat(filepath.Join(snapDir, "s1")); err != nil {
		t.Errorf("renamed snapshot files: %v", err)
	}
	if _, err := d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "s2"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.client.RenameSnapshot(ctx, name, "s1", "s2")
	wantStatusError(t, "rename onto an existing name", err, http.StatusConflict, "s2")

	// Change the config, then restore: the config comes back, the guest
	// boots afresh (it ran when the snapshot was taken) and is not Ready.
	if _, err := d.client.UpdateConfig(ctx, name, map[string]string{"user.x": "2", "user.y": "new"}, nil); err != nil {
		t.Fatal(err)
	}
	before, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	mark = rec.mark()
	out = d.cli(ctx, "restore", name, "s1")
	if !strings.Contains(out, "restored from s1") {
		t.Errorf("restore printed %q", out)
	}
	rec.wait(ctx, mark, events.InstanceSnapshotRestored, 1, opTimeout)
	rec.wait(ctx, mark, events.InstanceStarted, 1, opTimeout)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Config["user.x"] != "1" || inst.Config["user.y"] != "" || inst.Ready() || inst.Boot != before.Boot+1 || inst.StatusCode != int(status.Running) {
		t.Errorf("after restore: status %s, ready %v, boot %d (was %d), user.x %q, user.y %q; want Running, not Ready, the next boot, user.x 1, no user.y",
			inst.Status, inst.Ready(), inst.Boot, before.Boot, inst.Config["user.x"], inst.Config["user.y"])
	}
	g = &guest{name: name, dir: inst.Details["guest_dir"], socket: inst.DevlxdSocket}
	d.waitInstance(ctx, name, "agent connected after restore", agentTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected
	})
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready after restore", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })

	// Moving a running instance is refused.
	_, err = d.client.Move(ctx, name, "sim")
	wantStatusError(t, "move of a running instance", err, http.StatusConflict, "is Ready", "only a stopped instance moves", "guestlink stop "+name)
	if _, err := d.client.SetState(ctx, name, api.InstanceStatePut{Action: api.ActionStop, Force: true}); err != nil {
		t.Fatal(err)
	}
	// Snapshots survive a daemon restart.
	if err := d.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d.start()
	rec = d.recordSince(name, rec.lastID()) // the old stream ended with the daemon
	list, err := d.client.Snapshots(ctx, name)
	if err != nil || len(list) != 2 || list[0].Name != "s1" || list[1].Name != "s2" || !list[0].Ready || !list[0].Running ||
		list[0].Stateful || list[0].Config["user.x"] != "1" || list[0].Backend != "sim" {
		t.Fatalf("after a daemon restart: snapshots %+v, %v; want s1 (Ready, running, user.x 1) and s2", list, err)
	}
	out = d.cli(ctx, "snapshot", "list", name)
	if !strings.Contains(out, "s1") || !strings.Contains(out, "STATEFUL") {
		t.Errorf("snapshot list printed %q", out)
	}

	// Delete removes the files; deleting the instance removes the rest.
	mark = rec.mark()
	d.cli(ctx, "snapshot", "delete", name, "s1")
	rec.wait(ctx, mark, events.InstanceSnapshotDeleted, 1, opTimeout)
	if _, err := os.Stat(filepath.Join(snapDir, "s1")); !os.IsNotExist(err) {
		t.Errorf("deleted snapshot's files: stat err %v, want not exist", err)
	}
	_, err = d.client.Snapshot(ctx, name, "s1")
	wantStatusError(t, "deleted snapshot", err, http.StatusNotFound)
	if err := d.client.Delete(ctx, name, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.dir); !os.IsNotExist(err) {
		t.Errorf("guest directory (with the snapshots) after deleting the instance: stat err %v, want not exist", err)
	}
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.client.Move(ctx, name, "sim")
	wantStatusError(t, "move onto its own backend", err, http.StatusBadRequest, "already on backend sim")
	if list, err := d.client.Snapshots(ctx, name); err != nil || len(list) != 0 {
		t.Errorf("a new instance of the same name has snapshots %+v, %v", list, err)
	}
}

// TestSnapshotBadInput sends bad snapshot, restore and move requests to the
// real daemon: each gets its precise status and message, and no snapshot
// is made.
func TestSnapshotBadInput(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "snapbad"
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	base := "/1.0/instances/" + name
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		msg                      string // contained in the message
	}{
		{"no name", "POST", base + "/snapshots", `{}`, 400, "name is required"},
		{"slash in name", "POST", base + "/snapshots", `{"name":"a/b"}`, 400, `snapshot names may not contain slashes`},
		{"unknown field", "POST", base + "/snapshots", `{"name":"a","bogus":1}`, 400, `unknown field "bogus"`},
		{"bad name in path", "GET", base + "/snapshots/a%20b", "", 400, "white space"},
		{"unknown snapshot", "GET", base + "/snapshots/nosuch", "", 404, `snapshot "nosuch"`},
		{"unknown instance", "GET", "/1.0/instances/nosuch/snapshots", "", 404, `instance "nosuch": not found`},
		{"rename unknown", "POST", base + "/snapshots/nosuch", `{"name":"b"}`, 404, `renaming snapshot "nosuch"`},
		{"rename to nothing", "POST", base + "/snapshots/s", `{"name":""}`, 400, "name is required"},
		{"delete unknown", "DELETE", base + "/snapshots/nosuch", "", 404, `deleting snapshot "nosuch"`},
		{"put without restore", "PUT", base, `{}`, 400, "restore is required"},
		{"restore unknown", "PUT", base, `{"restore":"nosuch"}`, 404, `restoring snapshot "nosuch"`},
		{"restore bad name", "PUT", base, `{"restore":"../x"}`, 400, "slashes"},
		{"move without backend", "POST", base, `{}`, 400, "backend is required"},
		{"rename instance", "POST", base, `{"name":"other","backend":"sim"}`, 501, "renaming is not supported"},
		{"stateful on sim", "POST", base + "/snapshots", `{"name":"s","stateful":true}`, 501, "backend sim cannot take stateful snapshots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := adminDo(ctx, t, d, tc.method, tc.path, tc.body)
			if code != tc.code || !strings.Contains(msg, tc.msg) {
				t.Errorf("%s %s: %d %q\nwant %d containing %q", tc.method, tc.path, code, msg, tc.code, tc.msg)
			}
		})
	}
	if list, err := d.client.Snapshots(ctx, name); err != nil || len(list) != 0 {
		t.Errorf("snapshots after bad requests: %+v, %v", list, err)
	}
}
