package events

import (
	"context"
	"fmt"
)

// maxRecentWindow bounds the ids Recent reads in one query: the window
// doubles from 4n while too few events are found (ids have gaps where
// retention pruned a noisy instance's events, and other types may be
// frequent), so the walk takes a few queries, not one per 4n ids; a
// one-row probe skips an empty window without reading past it.
const maxRecentWindow = 1 << 14

// Recent returns the newest n stored events of type typ ("" for any), oldest
// first: what a page that lists recent activity shows before live events
// arrive. It reads back through the log in windows that double (up to
// maxRecentWindow ids) while too few are found, so it costs a few queries
// even when other types are frequent or the ids are sparse.
func (b *Bus) Recent(ctx context.Context, typ string, n int) ([]Event, error) {
	if n <= 0 {
		return nil, nil
	}
	last, err := b.LastID(ctx)
	if err != nil {
		return nil, err
	}
	var out []Event // newest first while collecting
	window := int64(4 * n)
	for hi := last; hi > 0 && len(out) < n; hi, window = hi-window, min(2*window, max(maxRecentWindow, int64(4*n))) {
		lo := max(hi-window, 0)
		// A one-row probe first: where ids are sparse, the full read would
		// return up to a window of rows past hi for nothing.
		probe, err := b.store.EventsAfter(ctx, lo, 1)
		if err != nil {
			return nil, fmt.Errorf("reading recent events: %w", err)
		}
		if len(probe) == 0 || probe[0].ID > hi {
			continue // nothing in (lo, hi]
		}
		recs, err := b.store.EventsAfter(ctx, lo, int(hi-lo))
		if err != nil {
			return nil, fmt.Errorf("reading recent events: %w", err)
		}
		for i := len(recs) - 1; i >= 0 && len(out) < n; i-- {
			if recs[i].ID > hi {
				continue // ids may have gaps: the window's limit can reach past hi
			}
			ev, err := decodeStored(recs[i])
			if err != nil {
				continue // logged on replay; a bad record is skipped here
			}
			if typ == "" || ev.Type == typ {
				out = append(out, ev)
			}
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
