package qemuvm

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// maxDrained bounds the ring bytes a guest's vm keeps for ReadRing (the
// ring itself holds RingSize).
const maxDrained = 64 << 10

// ReadRing reads and consumes up to max bytes of the guest's ring buffer:
// first the bytes the backend drained on its own at the guest's power-off
// (kept after QEMU is gone, so the agent's last word is not lost with
// it), then the ring's.
func (b *Backend) ReadRing(ctx context.Context, hb sdk.Handle, max int) ([]byte, error) {
	h, err := b.decode(hb)
	if err != nil {
		return nil, fmt.Errorf("reading ring buffer: %w", err)
	}
	if max <= 0 {
		return nil, fmt.Errorf("reading ring buffer of %q: %w: size %d", h.Name, sdk.ErrInvalid, max)
	}
	v := b.vm(h.UUID)
	kept := v.takeDrained(max)
	if len(kept) == max {
		return kept, nil
	}
	if !h.running() {
		if len(kept) > 0 {
			return kept, nil
		}
		return nil, fmt.Errorf("reading ring buffer of %q: %w: not running", h.Name, sdk.ErrConflict)
	}
	c, err := b.ensureQMP(ctx, h, v)
	if err == nil {
		var data []byte
		if data, err = readRingQMP(ctx, c, max-len(kept)); err == nil {
			return append(kept, data...), nil
		}
	}
	if len(kept) > 0 {
		return kept, nil // QEMU went meanwhile: what was kept is what is left
	}
	return nil, fmt.Errorf("reading ring buffer of %q: %w", h.Name, err)
}

// readRingQMP reads and consumes up to max bytes of the ring chardev.
func readRingQMP(ctx context.Context, c *qmp.Client, max int) ([]byte, error) {
	var s string
	if err := c.Execute(ctx, "ringbuf-read", map[string]any{"device": RingChardev, "size": max, "format": "base64"}, &s); err != nil {
		return nil, err
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decoding ringbuf-read's answer: %w", err)
	}
	return data, nil
}

// keepDrained appends ring bytes the backend read on its own; past
// maxDrained the oldest go, as in a ring.
func (v *vm) keepDrained(data []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.drained = append(v.drained, data...)
	if over := len(v.drained) - maxDrained; over > 0 {
		v.drained = append(v.drained[:0], v.drained[over:]...)
	}
}

// takeDrained takes up to max of the kept bytes, oldest first.
func (v *vm) takeDrained(max int) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := min(max, len(v.drained))
	if n == 0 {
		return nil
	}
	out := append([]byte(nil), v.drained[:n]...)
	v.drained = append(v.drained[:0], v.drained[n:]...)
	return out
}
