package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/events"
)

// TestSimAccessTimeline runs an exec and file push, pull and delete in a
// sim guest through the real daemon, CLI and agent, and reads them back
// where an operator sees an instance's history: its lifecycle events (what
// guestlink monitor and the dashboard's activity show: instance-exec with
// the command, the exit code and the requestor; instance-file-pushed,
// -retrieved, -deleted with the path) and its timeline (kinds exec and
// file, who, the command or path, the exit code or status), a refused pull
// included.
func TestSimAccessTimeline(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "access1"
	d.launch(ctx, name, nil, nil)
	rec := d.record(name)
	mark := rec.mark()

	if _, _, err := d.runCLI(ctx, "exec", name, "--", "sh", "-c", "exit 3"); err == nil {
		t.Fatal("exec of exit 3 exited 0")
	}
	rec.wait(ctx, mark, events.InstanceExec, 1, opTimeout)
	src := filepath.Join(t.TempDir(), "note")
	if err := os.WriteFile(src, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cli(ctx, "file", "push", src, name+"/note")
	d.cli(ctx, "file", "pull", name+"/note", filepath.Join(t.TempDir(), "back"))
	if _, _, err := d.runCLI(ctx, "file", "pull", name+"/nosuch", filepath.Join(t.TempDir(), "x")); err == nil {
		t.Fatal("pull of a missing file succeeded")
	}
	d.cli(ctx, "file", "delete", name+"/note")
	rec.wait(ctx, mark, events.InstanceFilePushed, 1, opTimeout)
	rec.wait(ctx, mark, events.InstanceFileRetrieved, 2, opTimeout)
	rec.wait(ctx, mark, events.InstanceFileDeleted, 1, opTimeout)

	for _, ev := range rec.eventsSince(mark) {
		lc, err := ev.Lifecycle()
		if err != nil {
			t.Fatal(err)
		}
		switch lc.Action {
		case events.InstanceExec:
			cmd, _ := lc.Context["command"].([]any)
			if len(cmd) != 3 || cmd[2] != "exit 3" || lc.Context["exit_code"] != float64(3) || lc.Requestor == nil || lc.Requestor.Protocol != "unix" {
				t.Errorf("instance-exec event: context %v, requestor %+v; want the command, exit_code 3, the unix requestor", lc.Context, lc.Requestor)
			}
		case events.InstanceFilePushed, events.InstanceFileDeleted:
			if lc.Context["path"] != "/note" || lc.Context["status"] != float64(200) {
				t.Errorf("%s event: context %v", lc.Action, lc.Context)
			}
		}
	}

	tl, err := d.client.Timeline(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl {
		if e.Kind == "exec" || e.Kind == "file" {
			got = append(got, e.Kind+" "+e.To+" "+e.Detail)
		}
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{
		`exec exit 3 sh -c "exit 3" (by unix `,
		"file pushed /note (by unix ",
		"file retrieved /note (by unix ",
		"file refused 404 /nosuch (by unix ",
		"file deleted /note (by unix ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("timeline lacks %q:\n%s", want, text)
		}
	}
}
