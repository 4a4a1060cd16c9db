package sdk

import (
	"bytes"
	"time"
)

// HeartbeatRepeatWithin is how recent the previous drain of a guest's ring
// must be for a repeat of its word to count as a heartbeat (RingRepeat):
// two of the agent's default heartbeat periods, less than the three after
// which the daemon declares the agent lost, so a word after a silence the
// daemon may have taken for a loss is never held.
const HeartbeatRepeatWithin = 10 * time.Second

// heartbeatLine is the one word whose repeat is a heartbeat: CONNECTED. A
// repeated STARTED asks the daemon to advertise itself (docs/guest-link.md)
// and STOPPED is the agent's last word: both go at once.
var heartbeatLine = []byte("CONNECTED\n")

// RingRepeat tells a backend with CapRingPush which of a guest's ring
// drains are heartbeats (Event.Heartbeat): exactly the line "CONNECTED",
// when the guest's previous drain with bytes ended with that same line
// less than HeartbeatRepeatWithin ago. A drain with no bytes changes
// nothing either and counts as one. Keep one per guest and call Heartbeat
// with every drain, in the order of their sequence numbers; the zero
// value is ready to use. It is not safe for concurrent use (the drains of
// a guest are ordered anyway).
type RingRepeat struct {
	lastLine bool      // the last drain with bytes ended with heartbeatLine
	at       time.Time // when that drain was made
}

// Heartbeat records the drain data made at now and reports whether it is
// a heartbeat.
func (r *RingRepeat) Heartbeat(data []byte, now time.Time) bool {
	if len(data) == 0 {
		return true
	}
	hb := r.lastLine && now.Sub(r.at) < HeartbeatRepeatWithin && bytes.Equal(data, heartbeatLine)
	r.lastLine, r.at = bytes.HasSuffix(data, heartbeatLine) &&
		(len(data) == len(heartbeatLine) || data[len(data)-len(heartbeatLine)-1] == '\n'), now
	return hb
}
