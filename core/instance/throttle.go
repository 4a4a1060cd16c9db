package instance

import (
	"context"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/core/events"
)

// Budgets a guest can go over (GuestThrottled's budget argument).
const (
	// BudgetRing is the ring-buffer read budget (bytes and lines per
	// second) of core/agentmon.
	BudgetRing = "ring"
	// BudgetState is the state-change budget shared by devlxd PATCH /1.0,
	// ring words and guest reboots (core/statebudget).
	BudgetState = "state"
)

// kindThrottle is the timeline kind of GuestThrottled's entries.
const kindThrottle = "throttle"

// GuestThrottled records that the guest of the instance with the given uuid
// went over a budget (BudgetRing, BudgetState) and that what it sent beyond
// it is dropped: a timeline entry (kind "throttle", to = budget, the
// detail) and an instance-throttled lifecycle event with the budget and the
// detail. Callers report once per throttling episode, not per dropped
// item. An unknown uuid is errdefs.ErrNotFound.
func (m *Manager) GuestThrottled(ctx context.Context, uuid, budget, detail string) error {
	e, err := m.lookupUUID(ctx, uuid)
	if err != nil {
		return fmt.Errorf("recording throttled guest: %w", err)
	}
	_, err = m.mutate(ctx, e, func(c *change) error {
		c.throttled(budget, detail)
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording throttled guest of instance %s: %w", uuid, err)
	}
	return nil
}

// throttled records in c that the guest went over budget: the timeline
// entry and the instance-throttled event of GuestThrottled.
func (c *change) throttled(budget, detail string) {
	c.note(kindThrottle, "", budget, "daemon", detail)
	c.emit(events.InstanceThrottled, map[string]any{"budget": budget, "detail": detail}, events.Requestor{Protocol: "daemon"})
}

// resetQuiet is how long a guest must stay within its state budget before
// its next reboot over budget starts a new throttling episode (and a new
// instance-throttled event); core/agentmon's ring and word budgets use the
// same.
const resetQuiet = 10 * time.Second

// budgetReset takes one state change from the budget of c's guest for a
// reboot and reports whether the reboot may be recorded (the timeline
// entry "guest rebooted"). One over budget is counted, and the first of a
// throttling episode records instance-throttled (BudgetState); the next
// reboot recorded says how many were not. A refused reboot still clears
// Ready: only its record is dropped, never what it means.
func (m *Manager) budgetReset(c *change) bool {
	if m.budget.Allow(c.rec.UUID) {
		return true
	}
	c.rt.resetsDropped++
	if c.rt.resetThrottled.IsZero() || c.now.Sub(c.rt.resetThrottled) >= resetQuiet {
		c.throttled(BudgetState, fmt.Sprintf(
			"guest reboots over budget (%g per second, bursts of %d): not recorded in the timeline; the next recorded reboot counts them",
			m.budget.Rate(), m.budget.Burst()))
	}
	c.rt.resetThrottled = c.now
	return false
}
