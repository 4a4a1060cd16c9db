package qemuvm

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// ReadRing reads and consumes up to max bytes of the guest's ring buffer.
func (b *Backend) ReadRing(ctx context.Context, hb sdk.Handle, max int) ([]byte, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	if max <= 0 {
		return nil, fmt.Errorf("reading ring buffer of %q: %w: size %d", h.Name, sdk.ErrInvalid, max)
	}
	if !h.running() {
		return nil, fmt.Errorf("reading ring buffer of %q: %w: not running", h.Name, sdk.ErrConflict)
	}
	c, err := b.ensureQMP(ctx, h, b.vm(h.UUID))
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	var s string
	if err := c.Execute(ctx, "ringbuf-read", map[string]any{"device": RingChardev, "size": max, "format": "base64"}, &s); err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
	}
	return data, nil
}
