// Package ringbuffer is the hypervisor side of the guest's ring: a byte ring
// with the semantics of QEMU's "ringbuf" character device, which a backend
// (the sim VMM) keeps for each guest and the daemon reads through the
// plugin's ReadRing. The guest side that writes into it is agent/ringwriter;
// the words and lines it carries are link/ringproto. Its size is a power of two,
// writes never block and overwrite the oldest bytes when the ring is full,
// and reads consume what they return.
package ringbuffer

import (
	"errors"
	"fmt"
	"sync"
)

// MaxSize is the largest ring size New accepts (16 MiB).
const MaxSize = 1 << 24

// ErrSize is the kind of error New returns for a size that is not a power of
// two between 1 and MaxSize.
var ErrSize = errors.New("ring size must be a power of two")

// Ring is a fixed-size byte ring with QEMU ringbuf semantics. It is safe for
// concurrent use. The zero value is not usable; call New.
type Ring struct {
	mu   sync.Mutex
	buf  []byte
	mask uint64
	prod uint64 // total bytes ever written
	cons uint64 // total bytes ever consumed or dropped
}

// New returns an empty ring of size bytes. Like QEMU it refuses a size that
// is not a power of two; it also refuses sizes above MaxSize.
func New(size int) (*Ring, error) {
	if size <= 0 || size&(size-1) != 0 || size > MaxSize {
		return nil, fmt.Errorf("ring size %d: %w (1, 2, 4, ... %d)", size, ErrSize, MaxSize)
	}
	return &Ring{buf: make([]byte, size), mask: uint64(size - 1)}, nil
}

// Size returns the ring's capacity in bytes.
func (r *Ring) Size() int { return len(r.buf) }

// Len returns the number of unread bytes in the ring.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int(r.prod - r.cons)
}

// Write stores p in the ring, overwriting the oldest unread bytes when p does
// not fit. It never blocks and always returns len(p), nil, so a Ring is an
// io.Writer.
func (r *Ring) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := uint64(len(r.buf))
	// Only the last size bytes of p can survive; skip the rest as QEMU's
	// byte-by-byte loop would have overwritten them anyway.
	src := p
	if uint64(len(src)) > size {
		r.prod += uint64(len(src)) - size
		src = src[uint64(len(src))-size:]
	}
	for len(src) > 0 {
		off := r.prod & r.mask
		c := copy(r.buf[off:], src)
		src = src[c:]
		r.prod += uint64(c)
	}
	if r.prod-r.cons > size {
		r.cons = r.prod - size
	}
	return n, nil
}

// Read consumes and returns up to max of the oldest unread bytes. An empty
// ring (or max <= 0) returns an empty slice, not an error.
func (r *Ring) Read(max int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	avail := r.prod - r.cons
	if max <= 0 || avail == 0 {
		return []byte{}
	}
	n := avail
	if uint64(max) < n {
		n = uint64(max)
	}
	out := make([]byte, n)
	for got := uint64(0); got < n; {
		off := r.cons & r.mask
		end := off + (n - got)
		if end > uint64(len(r.buf)) {
			end = uint64(len(r.buf))
		}
		c := copy(out[got:], r.buf[off:end])
		got += uint64(c)
		r.cons += uint64(c)
	}
	return out
}
