package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/link/ringproto"
)

// TestUnreachableKeepsConnectedWhenBusy: a failed request to the daemon
// takes the agent back to STARTED (so the daemon advertises again) only
// when the daemon looks gone, never when it was slow (a timeout) or shed
// the connection before its TLS handshake (upstream.ErrShed, as the
// devlxd server does in a storm): in a 10,000-guest Ready storm, agents
// that went back to STARTED on shed connections were each re-advertised to
// and re-declared, more handshakes for a daemon already shedding them.
func TestUnreachableKeepsConnectedWhenBusy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		connected bool
	}{
		{"timeout", fmt.Errorf("%w: PATCH /1.0: %w", upstream.ErrUnreachable, context.DeadlineExceeded), true},
		{"shed", fmt.Errorf("%w: PATCH /1.0: TLS handshake with daemon: %w: %w", upstream.ErrUnreachable, upstream.ErrShed, io.EOF), true},
		{"refused", fmt.Errorf("%w: PATCH /1.0: dialing daemon: %w", upstream.ErrUnreachable, syscall.ECONNREFUSED), false},
		{"connection lost mid-request", fmt.Errorf("%w: PATCH /1.0: reading answer: %w", upstream.ErrUnreachable, io.ErrUnexpectedEOF), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{log: slog.New(slog.DiscardHandler), kick: make(chan struct{}, 1), word: ringproto.Connected}
			a.unreachable(tc.err)
			if got := a.Word() == ringproto.Connected; got != tc.connected {
				t.Errorf("after %v: word %s, want connected=%v", tc.err, a.Word(), tc.connected)
			}
		})
	}
}
