package qemuvm

import (
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestExitKind checks how QEMU's end is classified by its SHUTDOWN
// event's reason (docs/plugins.md): the guest powering off or rebooting
// under -no-reboot is a power-off; a panic, a host-side end or no SHUTDOWN
// at all (QEMU killed) is a crash.
func TestExitKind(t *testing.T) {
	tests := []struct {
		reason string
		want   sdk.ExitKind
	}{
		{"guest-shutdown", sdk.ExitPoweroff},
		{"guest-reset", sdk.ExitPoweroff},
		{"guest-panic", sdk.ExitCrash},
		{"host-signal", sdk.ExitCrash},
		{"host-qmp-quit", sdk.ExitCrash},
		{"", sdk.ExitCrash},
	}
	for _, tt := range tests {
		if got := exitKind(tt.reason); got != tt.want {
			t.Errorf("SHUTDOWN reason %q: %s, want %s", tt.reason, got, tt.want)
		}
	}
}
