package events

import (
	"context"
	"fmt"
)

// Recent returns the newest n stored events of type typ ("" for any), oldest
// first: what a page that lists recent activity shows before live events
// arrive. It reads back through the log in windows, so it costs a few
// queries even when other types are frequent.
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
	for hi := last; hi > 0 && len(out) < n; hi -= window {
		lo := max(hi-window, 0)
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
