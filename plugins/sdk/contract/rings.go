package contract

import (
	"context"
	"fmt"
)

// MaxRingReads is the most reads one ReadRings call carries; a larger batch
// is ErrInvalid.
const MaxRingReads = 1024

// RingRead is one guest's read in a ReadRings batch: up to Max bytes of the
// ring of the guest of Handle, as ReadRing reads them.
type RingRead struct {
	Handle Handle
	Max    int
}

// RingData is the outcome of one RingRead: the bytes read, or the error
// ReadRing would have returned.
type RingData struct {
	Data []byte
	Err  error
}

// RingBatchReader is the optional interface of a Backend that reads many
// guests' rings in one call. A daemon with thousands of guests reads their
// heartbeats in batches through it: one call to the plugin per batch
// instead of one per guest. Use ReadRings to call it on any Backend.
type RingBatchReader interface {
	// ReadRings returns one RingData per read, in order. An error of the
	// whole call (the plugin is gone) is returned as such.
	ReadRings(ctx context.Context, reads []RingRead) ([]RingData, error)
}

// ReadRings reads a batch with b's ReadRings when b has one, else with one
// ReadRing per read. It always returns one RingData per read: the error of
// a failed batch call is every read's.
func ReadRings(ctx context.Context, b Backend, reads []RingRead) []RingData {
	if br, ok := b.(RingBatchReader); ok {
		res, err := br.ReadRings(ctx, reads)
		if err == nil && len(res) == len(reads) {
			return res
		}
		if err == nil {
			err = fmt.Errorf("reading ring buffers: %d results for %d reads: %w", len(res), len(reads), ErrUnavailable)
		}
		out := make([]RingData, len(reads))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	out := make([]RingData, len(reads))
	for i, r := range reads {
		out[i].Data, out[i].Err = b.ReadRing(ctx, r.Handle, r.Max)
	}
	return out
}
