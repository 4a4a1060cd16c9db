package agentmon

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// TestHoldAdvertisements is what a restarted daemon's recovery relies on:
// while the advertisements are held, the monitors of the guests it
// recovered start but no PUT /1.0 reaches an agent (in synctest, with every
// goroutine blocked, no agent dial was made); once released, at most
// MaxAdvertising of them run at once (the agents here never answer, so the
// dials that began are the ones running) and the others wait for a slot,
// while an advertisement asked for with nothing held does not wait; Close
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
		// Asked for while nothing holds them, an advertisement takes no
		// slot: a guest whose agent never answers cannot hold back other
		// guests' advertisements beyond the released burst.
		late := &instance.Instance{Name: "vm1", UUID: "uuid-late", Backend: "fleet", Config: map[string]string{}}
		g.mu.Lock()
		g.insts[late.UUID] = late
		g.mu.Unlock()
		svc.GuestRunning(late, nil)
		synctest.Wait()
		if d := links.dialing.Load(); d != max+1 {
			t.Fatalf("%d agent dials after a guest started with nothing held, want %d (the burst's %d and its own)", d, max+1, max)
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

// TestPushingBackendNeverRead: once a backend pushed ring bytes for any of
// its guests, a new monitor of another guest of that backend never reads
// its ring through ReadRing, even before its own first push (a restarted
// daemon's new monitors otherwise read every guest through the plugin
// every 250 ms until its next heartbeat, beside the recovery's calls). In
// synctest, with every goroutine blocked: the fleet guest's monitor made no
// read (a read here never returns, so one would be counted waiting), while
// the monitor of a guest whose backend never pushed reads its ring as
// before.
func TestPushingBackendNeverRead(t *testing.T) {
	certs := testCerts(t)
	synctest.Test(t, func(t *testing.T) {
		g := &stuckGuests{insts: map[string]*instance.Instance{}}
		svc, err := New(Config{Instances: g, Links: &stuckLinks{}, Certs: certs, RequestTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		inst := func(uuid, backend string) *instance.Instance {
			i := &instance.Instance{Name: "vm1", UUID: uuid, Backend: backend, Config: map[string]string{}}
			g.mu.Lock()
			g.insts[uuid] = i
			g.mu.Unlock()
			return i
		}
		pushed := inst("uuid-pushed", "fleet")
		svc.BackendEvent(pushed, contract.Event{UUID: pushed.UUID, Kind: contract.EventRingData, Ring: []byte("CONNECTED\n"), RingSeq: 1})
		svc.GuestRunning(inst("uuid-silent", "fleet"), nil)
		synctest.Wait()
		if r := g.reading.Load(); r != 0 {
			t.Fatalf("%d ring reads by the monitor of a guest whose backend pushes, want 0", r)
		}
		svc.GuestRunning(inst("uuid-other", "qemu"), nil)
		synctest.Wait()
		if r := g.reading.Load(); r != 1 {
			t.Fatalf("%d ring reads by the monitor of a guest whose backend never pushed, want 1", r)
		}
	})
}
