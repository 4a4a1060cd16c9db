package events_test

import (
	"strings"
	"testing"

	"github.com/guestlink/guestlink/core/events"
)

func TestRequestorDescribe(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	for _, tt := range []struct {
		name     string
		by       events.Requestor
		describe string
		cause    string
	}{
		{"unix", events.Requestor{Protocol: "unix", Username: "root", UID: "0"}, "unix root (uid 0)", "api: unix root (uid 0)"},
		{"tls", events.Requestor{Protocol: "tls", Username: "laptop", Fingerprint: fp, Address: "192.0.2.7:1"}, "tls laptop abababababababab", "api: tls laptop abababababababab"},
		{"bearer", events.Requestor{Protocol: "bearer", Username: "bearer/ci"}, "bearer/ci", "api: bearer/ci"},
		{"session", events.Requestor{Protocol: "session", Username: "session/1a2b3c4d"}, "session/1a2b3c4d", "api: session/1a2b3c4d"},
		{"unknown", events.Requestor{}, "", "api"},
		{"long", events.Requestor{Protocol: "tls", Username: strings.Repeat("n", 63), Fingerprint: fp}, "tls " + strings.Repeat("n", 63) + " abababababababab", "api: tls " + strings.Repeat("n", 55)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.by.Describe(); got != tt.describe {
				t.Errorf("Describe = %q, want %q", got, tt.describe)
			}
			if got := tt.by.APICause(); got != tt.cause || len(got) > 64 {
				t.Errorf("APICause = %q, want %q (at most 64 bytes)", got, tt.cause)
			}
		})
	}
	// LXD's keys stay in the stored metadata; the new ones appear only
	// when set.
	raw := events.NewLifecycle(events.InstanceReady, "web1", nil, &events.Requestor{Protocol: "devlxd"}).Metadata
	if !strings.HasSuffix(string(raw), `"requestor":{"username":"","protocol":"devlxd","address":""}}`) {
		t.Fatalf("JSON = %s", raw)
	}
}
