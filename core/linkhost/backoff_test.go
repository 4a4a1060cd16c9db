package linkhost

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
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

// TestAcceptBackoffTiming runs a serial link's accept loop through four
// EMFILE errors on a fake clock: the connection that follows is accepted
// after exactly the four waits, 5 + 10 + 20 + 40 ms.
func TestAcceptBackoffTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &scriptedSerial{errs: [][]error{{emfile(), emfile(), emfile(), emfile()}}}
		h := newHost(t, Config{Serial: fs})
		start := time.Now()
		if err := h.Attach("uuid-s", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/s"}); err != nil {
			t.Fatal(err)
		}
		feed(t, fs.session(0).chanListener, nil)
		if got, want := time.Since(start), 75*time.Millisecond; got != want {
			t.Fatalf("connection accepted after %v, want %v", got, want)
		}
		if got := acceptOne(t, h); got.Identity.InstanceUUID != "uuid-s" {
			t.Fatalf("identity %+v", got.Identity)
		}
	})
}
