package instance

import (
	"context"
	"fmt"

	"github.com/guestlink/guestlink/core/events"
)

// Budgets a guest can go over (GuestThrottled's budget argument).
const (
	// BudgetRing is the ring-buffer read budget (bytes and lines per
	// second) of core/agentmon.
	BudgetRing = "ring"
	// BudgetState is the state-change budget shared by devlxd PATCH /1.0
	// and ring words (core/statebudget).
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
		c.note(kindThrottle, "", budget, "daemon", detail)
		c.emit(events.InstanceThrottled, map[string]any{"budget": budget, "detail": detail}, events.Requestor{Protocol: "daemon"})
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording throttled guest of instance %s: %w", uuid, err)
	}
	return nil
}
