// Package listener wraps the daemon's net.Listeners so that no client can
// stop a server: Retry keeps accepting through temporary errors (EMFILE,
// ENFILE and the like) with a back-off, and Limit bounds the connections a
// listener holds (per peer address and in all), gives each a deadline to
// send its first request header and drops a client that stops reading.
package listener

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Back-off of an accept loop after an error: MinBackoff doubling up to
// MaxBackoff (5 ms, 10 ms, ... 1 s), without jitter.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = time.Second
)

// DefaultLogInterval is how often an accept loop that keeps failing logs:
// one line per interval with the number of errors since the last, never one
// per error.
const DefaultLogInterval = 10 * time.Second

// NewBackoff returns the waits between accepts after errors: MinBackoff
// doubling up to MaxBackoff; Reset after a successful accept starts over.
func NewBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: MinBackoff, Multiplier: 2, MaxInterval: MaxBackoff}
}

// Temporary reports whether err is an accept error that passes by itself:
// a timeout, or a shortage of descriptors, buffers or memory (EMFILE,
// ENFILE, ENOBUFS, ENOMEM), or a connection that went before it was
// accepted (ECONNABORTED, EPROTO), or an interrupted call.
func Temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
