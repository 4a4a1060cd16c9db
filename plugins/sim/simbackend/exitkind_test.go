package simbackend

import (
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// TestExitKind checks how a sim guest's exit record is classified
// (docs/plugins.md): status 0 by itself, or after a powerdown request, is
// a power-off; any other status, a signal, a quit or a VMM error a crash.
func TestExitKind(t *testing.T) {
	tests := []struct {
		name string
		rec  simvm.ExitRecord
		want sdk.ExitKind
	}{
		{"exit 0", simvm.ExitRecord{Reason: simvm.ReasonGuest, Status: "exit status 0", Code: 0}, sdk.ExitPoweroff},
		{"powerdown", simvm.ExitRecord{Reason: simvm.ReasonPowerdown, Status: "exit status 7", Code: 7}, sdk.ExitPoweroff},
		{"exit 3", simvm.ExitRecord{Reason: simvm.ReasonGuest, Status: "exit status 3", Code: 3}, sdk.ExitCrash},
		{"signal", simvm.ExitRecord{Reason: simvm.ReasonGuest, Status: "signal: killed", Code: -1}, sdk.ExitCrash},
		{"quit", simvm.ExitRecord{Reason: simvm.ReasonQuit, Status: "signal: killed", Code: -1}, sdk.ExitCrash},
		{"vmm error", simvm.ExitRecord{Reason: simvm.ReasonError, Status: "not started", Code: -1}, sdk.ExitCrash},
	}
	for _, tt := range tests {
		if got := exitKind(&tt.rec); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
