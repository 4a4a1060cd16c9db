package linkhost

import (
	"testing"
	"time"
)

// TestAcceptBackoff checks the waits of an accept loop after temporary
// errors: 5 ms doubling up to 1 s, no jitter, and Reset starts over.
func TestAcceptBackoff(t *testing.T) {
	bo := acceptBackoff()
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, d := range want {
		if got := bo.NextBackOff(); got != d*time.Millisecond {
			t.Fatalf("wait %d = %v, want %v", i, got, d*time.Millisecond)
		}
	}
	bo.Reset()
	if got := bo.NextBackOff(); got != minAcceptBackoff {
		t.Fatalf("wait after Reset = %v, want %v", got, minAcceptBackoff)
	}
}
