package events

// Stats is a snapshot of the bus's subscriptions, for metrics.
type Stats struct {
	// Subscribers is the number of open subscriptions.
	Subscribers int
	// Overflows counts the subscriptions the bus ended because their
	// subscriber fell behind (ErrOverflow): the events it would have
	// received are dropped for it, and it must resume from its last id.
	Overflows uint64
}

// Stats returns the bus's subscription counts. It is cheap: one lock, no
// allocation.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Subscribers: len(b.subs), Overflows: b.overflows}
}
