package agentmon

import (
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/link/ringproto"
)

// step is one input to a tracker: a word, a PUT result, or a lost check.
type step struct {
	word      ringproto.Word
	advert    *bool
	check     time.Duration // time since the last word for a lost check
	wantState instance.AgentState
	wantAdv   bool // for words: whether to advertise
}

func TestTracker(t *testing.T) {
	ok, failed := true, false
	const lostAfter = 15 * time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{"started then confirmed", []step{
			{word: ringproto.Started, wantState: instance.AgentStarted, wantAdv: true},
			{advert: &ok, wantState: instance.AgentStarted},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: false},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: false},
		}},
		{"connected before any advertisement (daemon restart)", []step{
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: true},
			{advert: &ok, wantState: instance.AgentConnected},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: false},
		}},
		{"failed advertisement is retried", []step{
			{word: ringproto.Started, wantState: instance.AgentStarted, wantAdv: true},
			{advert: &failed, wantState: instance.AgentStarted},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: true},
		}},
		{"started after connected re-advertises", []step{
			{advert: &ok},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: false},
			{word: ringproto.Started, wantState: instance.AgentStarted, wantAdv: true},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: false},
		}},
		{"stopped does not advertise and is never lost", []step{
			{word: ringproto.Stopped, wantState: instance.AgentStopped, wantAdv: false},
			{check: time.Hour, wantState: instance.AgentStopped},
		}},
		{"lost after three periods, back on a word", []step{
			{advert: &ok},
			{word: ringproto.Connected, wantState: instance.AgentConnected},
			{check: lostAfter - time.Nanosecond, wantState: instance.AgentConnected},
			{check: lostAfter, wantState: instance.AgentLost},
			{word: ringproto.Connected, wantState: instance.AgentConnected, wantAdv: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr tracker
			now := time.Unix(1000, 0)
			for i, s := range tt.steps {
				switch {
				case s.word != "":
					_, adv := tr.word(s.word, now)
					if adv != s.wantAdv {
						t.Fatalf("step %d (%s): advertise %v, want %v", i, s.word, adv, s.wantAdv)
					}
				case s.advert != nil:
					tr.advertised(*s.advert)
				case s.check > 0:
					tr.check(tr.lastBeat.Add(s.check), lostAfter)
				}
				if s.wantState != "" && tr.state != s.wantState {
					t.Fatalf("step %d: state %q, want %q", i, tr.state, s.wantState)
				}
			}
		})
	}
}

func TestTrackerInterval(t *testing.T) {
	const fast, mid, slow = 1, 2, 3
	tests := []struct {
		name string
		tr   tracker
		want time.Duration
	}{
		{"no agent", tracker{}, fast},
		{"started", tracker{state: instance.AgentStarted}, fast},
		{"connected awaiting confirmation", tracker{state: instance.AgentConnected}, fast},
		{"connected and confirmed", tracker{state: instance.AgentConnected, advertOK: true, confirmed: true}, slow},
		{"stopped", tracker{state: instance.AgentStopped}, mid},
		{"lost", tracker{state: instance.AgentLost}, mid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tr.interval(fast, mid, slow); got != tt.want {
				t.Fatalf("interval %v, want %v", got, tt.want)
			}
		})
	}
}
