package web

// StreamStats is a snapshot of the dashboard's live streams, for metrics.
type StreamStats struct {
	// Open is the number of live streams (open pages).
	Open int
	// Dropped counts the streams dropped because their page fell behind
	// (more live events waiting than its feed holds); the page reconnects
	// and resumes from its last id.
	Dropped uint64
}

// StreamStats returns the live streams' counts. It is cheap: one lock.
func (d *Dashboard) StreamStats() StreamStats {
	d.hub.mu.Lock()
	defer d.hub.mu.Unlock()
	return StreamStats{Open: len(d.hub.feeds), Dropped: d.hub.dropped}
}
