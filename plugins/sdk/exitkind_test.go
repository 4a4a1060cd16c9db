package sdk

import "testing"

// TestExitKindOnTheWire checks that an exit's kind crosses the plugin
// boundary unchanged, and that an unknown one arrives unspecified (the
// daemon then reads a power-off).
func TestExitKindOnTheWire(t *testing.T) {
	for _, k := range []ExitKind{ExitUnspecified, ExitPoweroff, ExitCrash} {
		ev := Event{UUID: "u", Kind: EventExited, Detail: "exit status 0", Exit: k}
		if got := eventFromProto(eventToProto(ev)); got.Exit != k || got.Detail != ev.Detail {
			t.Errorf("%s: arrived as %s %q", k, got.Exit, got.Detail)
		}
	}
	if got := eventFromProto(eventToProto(Event{Kind: EventExited, Exit: ExitKind(42)})); got.Exit != ExitUnspecified {
		t.Errorf("an unknown exit kind arrived as %s, want unspecified", got.Exit)
	}
}
