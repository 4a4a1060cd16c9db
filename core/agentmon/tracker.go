package agentmon

import (
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/ringproto"
)

// tracker is the agent state machine of one instance: what the ring words
// say, when the last one came, and whether the current advertisement was
// accepted by the agent and then confirmed by a CONNECTED.
type tracker struct {
	state    instance.AgentState
	lastBeat time.Time
	// advertOK: the agent answered the current advertisement's PUT /1.0
	// with success.
	advertOK bool
	// confirmed: a CONNECTED was read after advertOK became true.
	confirmed bool
}

// word applies a word read from the ring at now. It reports whether the
// state changed and whether the daemon should advertise itself.
func (t *tracker) word(w ringproto.Word, now time.Time) (changed, advertise bool) {
	t.lastBeat = now
	prev := t.state
	switch w {
	case ringproto.Started:
		// Not (or no longer) connected: the agent started, restarted or
		// lost the daemon.
		t.state = instance.AgentStarted
		t.confirmed = false
	case ringproto.Connected:
		t.state = instance.AgentConnected
		if t.advertOK {
			t.confirmed = true
		}
	case ringproto.Stopped:
		t.state = instance.AgentStopped
		t.confirmed, t.advertOK = false, false
	}
	return t.state != prev, !t.confirmed && t.state != instance.AgentStopped
}

// advertised records the outcome of a PUT /1.0 of the current
// advertisement: a success needs a CONNECTED read afterwards to confirm it.
func (t *tracker) advertised(ok bool) {
	t.advertOK = ok
	t.confirmed = false
}

// invalidate forgets the agent's acceptance of the advertisement (it
// changed: a new port, certificate or devlxd flag).
func (t *tracker) invalidate() {
	t.advertOK, t.confirmed = false, false
}

// check marks a started or connected agent lost when no word came for
// lostAfter. It reports whether the state changed.
func (t *tracker) check(now time.Time, lostAfter time.Duration) bool {
	if t.state != instance.AgentStarted && t.state != instance.AgentConnected {
		return false
	}
	if now.Sub(t.lastBeat) < lostAfter {
		return false
	}
	t.state = instance.AgentLost
	t.confirmed, t.advertOK = false, false
	return true
}

// interval is how long to wait before the next ring read: fast while
// waiting for the agent to start or to confirm an advertisement, slow once
// connected, in between when it stopped or was lost.
func (t *tracker) interval(fast, mid, slow time.Duration) time.Duration {
	switch t.state {
	case instance.AgentConnected:
		if t.confirmed {
			return slow
		}
		return fast
	case instance.AgentStopped, instance.AgentLost:
		return mid
	}
	return fast
}
