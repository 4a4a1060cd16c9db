package instance

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
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
