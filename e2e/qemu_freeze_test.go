package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/internal/testwait"
)

// freezeHook is the test's freeze hook in the guest: it says which action
// it was called with, into the agent's log (the guest's journal).
const freezeHook = `#!/bin/sh
echo "guestlink-test-hook $1"
`

// checkFreezeSnapshot snapshots a running guest whose agent is CONNECTED
// (TestQEMUDebian's booted Debian 12 guest): the snapshot freezes the
// guest's filesystems through the agent, with a hook installed in
// /etc/guestlink/freeze-hook.d, and thaws them; it reports
// filesystem-consistent with "/" frozen, the guest's journal (read through
// guestlink exec) shows the hook run with freeze and thaw and the agent's
// freeze and thaw, the guest still writes and syncs a file afterwards, and
// --no-freeze gives a crash-consistent snapshot.
func checkFreezeSnapshot(ctx context.Context, t *testing.T, d *daemonProc, name string) {
	t.Helper()
	hook := filepath.Join(t.TempDir(), "10-test")
	if err := os.WriteFile(hook, []byte(freezeHook), 0o755); err != nil {
		t.Fatal(err)
	}
	d.cli(ctx, "file", "push", "-p", "--mode", "0755", hook, name+"/etc/guestlink/freeze-hook.d/10-test")
	start := time.Now()
	out := d.cli(ctx, "snapshot", "create", name, "frozen")
	t.Logf("%s: snapshot with freeze took %v", name, time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "consistency filesystem: frozen through the agent: ") {
		t.Errorf("snapshot create printed %q; want filesystem-consistent, frozen through the agent", out)
	}
	sn, err := d.client.Snapshot(ctx, name, "frozen")
	if err != nil {
		t.Fatal(err)
	}
	if sn.Consistency != "filesystem" || !strings.HasSuffix(sn.ConsistencyDetail, " /") {
		t.Errorf("snapshot: consistency %q (%s); want filesystem with / frozen last", sn.Consistency, sn.ConsistencyDetail)
	}
	// The guest's journal: the hook with freeze, then the freeze, the thaw,
	// the hook with thaw.
	want := []string{"guestlink-test-hook freeze", "filesystems frozen", "filesystems thawed on request", "guestlink-test-hook thaw"}
	var journal string
	ok := testwait.Until(2*time.Minute, func() bool {
		journal, _, _ = d.runCLI(ctx, "exec", name, "--", "journalctl", "-u", "guestlink-agent", "--no-pager", "-o", "cat")
		return inOrderText(journal, want)
	})
	if !ok {
		t.Errorf("the guest's journal lacks, in order, %q:\n%s", want, lastLines(journal, 40))
	}
	// Thawed: the guest writes and syncs (a frozen filesystem would block
	// both until the agent's own timeout).
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, errOut, err := d.runCLI(wctx, "exec", name, "--", "sh", "-c", "echo thawed > /var/tmp/after-freeze && sync && cat /var/tmp/after-freeze")
	if err != nil || strings.TrimSpace(out) != "thawed" {
		t.Errorf("writing a file after the snapshot: %q %s %v", out, errOut, err)
	}
	sn, err = d.client.CreateSnapshot(ctx, name, api.InstanceSnapshotsPost{Name: "unfrozen", NoFreeze: true})
	if err != nil || sn.Consistency != "crash" {
		t.Errorf("--no-freeze snapshot: %+v, %v; want crash-consistent", sn, err)
	}
	list := d.cli(ctx, "snapshot", "list", name)
	if !strings.Contains(list, "filesystem") || !strings.Contains(list, "crash") {
		t.Errorf("snapshot list lacks the consistencies:\n%s", list)
	}
}

// inOrderText reports whether text holds each of want, in that order.
func inOrderText(text string, want []string) bool {
	for _, w := range want {
		i := strings.Index(text, w)
		if i < 0 {
			return false
		}
		text = text[i+len(w):]
	}
	return true
}

// lastLines returns the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
