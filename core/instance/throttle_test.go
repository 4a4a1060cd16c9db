package instance

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/statebudget"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// TestGuestThrottled checks that a throttling episode is one timeline entry
// and one instance-throttled event naming the budget.
func TestGuestThrottled(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	for _, budget := range []string{BudgetRing, BudgetState} {
		t.Run(budget, func(t *testing.T) {
			before, tlBefore := e.actions("web1"), e.timeline("web1")
			if err := e.m.GuestThrottled(bg, inst.UUID, budget, "over budget"); err != nil {
				t.Fatal(err)
			}
			after, tl := e.actions("web1"), e.timeline("web1")
			if len(after) != len(before)+1 || after[len(after)-1] != events.InstanceThrottled {
				t.Errorf("events %v, want one %s", after[len(before):], events.InstanceThrottled)
			}
			if want := "throttle ->" + budget + " daemon"; len(tl) != len(tlBefore)+1 || tl[len(tl)-1] != want {
				t.Errorf("timeline %v, want one %q", tl[len(tlBefore):], want)
			}
		})
	}
	if err := e.m.GuestThrottled(bg, "nope", BudgetRing, "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
}

// TestGuestResetBudget is the guest that reboots itself in a loop (a QEMU
// guest can reset thousands of times a second, each a contract.EventReset):
// every reboot clears Ready and reaches the hooks, but only the state
// budget's worth is recorded in the timeline; the excess is counted (the
// next recorded reboot says how many) and reported once per episode by
// one instance-throttled event, while another guest's reboots, on its own
// budget, are all recorded. The clock is synctest's.
func TestGuestResetBudget(t *testing.T) {
	const (
		perSecond = 10
		burst     = 20
		flood     = 500
	)
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.budget = statebudget.New(perSecond, burst)
		e.m = e.manager()
		noisy, quiet := e.create("noisy", nil), e.create("quiet", nil)
		for _, n := range []string{"noisy", "quiet"} {
			if err := e.m.Start(bg, n, adminCaller); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.m.SetReady(bg, noisy.UUID, true, events.Requestor{}); err != nil {
			t.Fatal(err)
		}
		reset := func(uuid string) {
			e.m.HandleBackendEvent("fake", contract.Event{UUID: uuid, Kind: contract.EventReset, Time: time.Now()})
		}
		rebootsOf := func(name string) (n int, last string) {
			tl, err := e.m.Timeline(bg, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tl {
				if x.Kind == kindState && x.From == "running" && x.To == "running" {
					n, last = n+1, x.Detail
				}
			}
			return n, last
		}
		throttles := func(name string) int { return count(e.actions(name), events.InstanceThrottled) }

		// The flood at one instant: the burst is recorded, the rest counted.
		// (Manager.SetReady is devlxd's call after its own draw: it takes
		// nothing here.)
		for range flood {
			reset(noisy.UUID)
		}
		for range 3 {
			reset(quiet.UUID)
		}
		recorded, _ := rebootsOf("noisy")
		if recorded != burst {
			t.Errorf("noisy guest: %d reboots recorded, want the burst, %d", recorded, burst)
		}
		if n := throttles("noisy"); n != 1 {
			t.Errorf("noisy guest: %d instance-throttled events, want 1", n)
		}
		if c := cond(t, e.get("noisy"), CondReady); c.Status != CondFalse {
			t.Errorf("noisy guest still Ready after rebooting: %+v", c)
		}
		if h := count(e.hooks.list(), "reset noisy"); h != flood {
			t.Errorf("noisy guest: %d reboots reached the hooks, want all %d", h, flood)
		}
		if n, _ := rebootsOf("quiet"); n != 3 || throttles("quiet") != 0 {
			t.Errorf("quiet guest: %d reboots recorded, %d throttle events; want 3 and none", n, throttles("quiet"))
		}

		// Once the budget refilled, the next reboot is recorded with the
		// count of those that were not; the episode goes on (no second
		// event) until the guest stays quiet for resetQuiet.
		time.Sleep(time.Second / perSecond)
		reset(noisy.UUID)
		n, last := rebootsOf("noisy")
		want := fmt.Sprintf("guest rebooted (and %d more times over budget, not recorded)", flood-burst)
		if n != burst+1 || last != want {
			t.Errorf("after the budget refilled: %d reboots recorded, last %q; want %d, %q", n, last, burst+1, want)
		}
		for range 2 * burst {
			reset(noisy.UUID)
		}
		if n := throttles("noisy"); n != 1 {
			t.Errorf("the same episode: %d instance-throttled events, want still 1", n)
		}
		time.Sleep(resetQuiet + time.Duration(burst/perSecond)*time.Second)
		for range 2 * burst {
			reset(noisy.UUID)
		}
		if n := throttles("noisy"); n != 2 {
			t.Errorf("a new episode after %v quiet: %d instance-throttled events, want 2", resetQuiet, n)
		}
	})
}
