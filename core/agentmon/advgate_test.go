package agentmon

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// TestHoldAdvertisements is what a restarted daemon's recovery relies on:
// while the advertisements are held, the monitors of the guests it
// recovered start but no PUT /1.0 reaches an agent (in synctest, with every
// goroutine blocked, no agent dial was made); once released, at most
// MaxAdvertising run at once (the agents here never answer, so the dials
// that began are the ones running) and the others wait for a slot; Close
// ends the waiting ones and the running ones alike. A second hold, and a
// release called twice, keep the gate's count right.
func TestHoldAdvertisements(t *testing.T) {
	const guests, max = 12, 4
	certs := testCerts(t)
	synctest.Test(t, func(t *testing.T) {
		g := &stuckGuests{insts: map[string]*instance.Instance{}}
		links := &stuckLinks{}
		svc, err := New(Config{Instances: g, Links: links, Certs: certs, RequestTimeout: time.Minute, MaxAdvertising: max})
		if err != nil {
			t.Fatal(err)
		}
		release := svc.HoldAdvertisements()
		other := svc.HoldAdvertisements()
		for i := range guests {
			inst := &instance.Instance{Name: "vm1", UUID: "uuid-" + strconv.Itoa(i), Backend: "fleet", Config: map[string]string{}}
			g.mu.Lock()
			g.insts[inst.UUID] = inst
			g.mu.Unlock()
			svc.GuestRunning(inst, nil)
		}
		synctest.Wait()
		if d := links.dialing.Load(); d != 0 {
			t.Fatalf("%d agent dials while the advertisements are held, want 0", d)
		}
		release()
		release() // idempotent: the other hold still holds
		synctest.Wait()
		if d := links.dialing.Load(); d != 0 {
			t.Fatalf("%d agent dials with one of two holds released, want 0", d)
		}
		other()
		synctest.Wait()
		if d := links.dialing.Load(); d != max {
			t.Fatalf("%d agent dials once released, want MaxAdvertising (%d) at once", d, max)
		}
		svc.mu.Lock()
		var pending int64
		for _, m := range svc.monitors {
			pending += m.advPending.Load()
		}
		svc.mu.Unlock()
		if pending != guests {
			t.Fatalf("%d advertisements pending, want one per guest (%d): none may be lost while waiting", pending, guests)
		}
		if err := svc.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if d := links.dialing.Load(); d != 0 {
			t.Fatalf("%d agent dials still waiting after Close", d)
		}
	})
}
