package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// TestGuestExitStatus is the exit half of "conditions say what happened"
// (issue 23) with real sim guests: a guest command that ends by itself with
// status 0 (the guest powered itself off) leaves the instance Stopped,
// although the sim reports a detail with every exit ("exit status 0
// (guest)"); one that exits with another status or kills itself with a
// signal (a crash) leaves it Error with the detail as its error. Each
// guest waits for a file the test creates once the instance runs, so the
// exit never races the start.
func TestGuestExitStatus(t *testing.T) {
	tests := []struct {
		name, instance, exit, status, errText string
	}{
		{"poweroff", "clean", "exit 0", "Stopped", ""},
		{"non-zero status", "status3", "exit 3", "Error", "exit status 3 (guest)"},
		{"killed by a signal", "killed", "kill -KILL $$", "Error", "signal: killed (guest)"},
	}
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.instance
			cmd := `while [ ! -e "$GUESTLINK_ROOT/go" ]; do sleep 0.05; done; ` + tt.exit
			if _, err := d.client.Create(ctx, api.InstancesPost{Name: name, Backend: "sim", Start: true,
				Config: map[string]string{"sim.command": cmd}}); err != nil {
				t.Fatal(err)
			}
			inst := d.waitInstance(ctx, name, "Running", time.Minute, func(i *api.Instance) bool { return i.Status == "Running" })
			root := filepath.Join(inst.Details["guest_dir"], "rootfs")
			if err := os.WriteFile(filepath.Join(root, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			got := d.waitInstance(ctx, name, "the guest's exit", time.Minute, func(i *api.Instance) bool { return i.Status != "Running" })
			if got.Status != tt.status || got.Details["error"] != tt.errText {
				t.Fatalf("after %q: status %s, error %q; want %s, error %q", tt.exit, got.Status, got.Details["error"], tt.status, tt.errText)
			}
		})
	}
}
