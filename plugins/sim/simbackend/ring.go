package simbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// ReadRing consumes up to max bytes of the guest's ring buffer.
func (b *Backend) ReadRing(ctx context.Context, raw sdk.Handle, max int) ([]byte, error) {
	h, err := b.guest(raw)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	if max <= 0 {
		return nil, fmt.Errorf("reading ring buffer of guest %q: size must be greater than zero, got %d: %w", h.ID, max, sdk.ErrInvalid)
	}
	data, err := b.ringReader(h).ReadRing(ctx, max)
	if errors.Is(err, simvm.ErrNotRunning) {
		return nil, fmt.Errorf("reading ring buffer of guest %q: not running: %w", h.ID, sdk.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of guest %q: %w", h.ID, err)
	}
	return data, nil
}

// ringReader returns the kept control connection of h's VMM while this
// process watches it (the guest runs), else a client that dials per read.
func (b *Backend) ringReader(h *handle) interface {
	ReadRing(ctx context.Context, size int) ([]byte, error)
} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w, ok := b.watchers[h.Dir]; ok {
		return w.ctl
	}
	return simvm.NewClient(h.paths())
}
