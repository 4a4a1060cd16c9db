// Package ringproto is the line protocol of the ring, shared by both sides:
// it defines the words the agent writes to the virtio-serial ring-buffer
// port (agent/ringwriter), the port names, and the host-side parser of what
// a ring read returned (core/agentmon reads through the backend's ReadRing).
package ringproto

import "bytes"

// Word is one agent state word written to the ring buffer as "WORD\n".
type Word string

// The words the agent writes to the ring buffer.
const (
	// Started is written once the agent's link listener is up and then, as a
	// heartbeat, while no advertisement has been validated.
	Started Word = "STARTED"
	// Connected is written after the daemon's advertisement was validated and
	// then, as a heartbeat, while the daemon stays reachable.
	Connected Word = "CONNECTED"
	// Stopped is written before a clean exit of the agent.
	Stopped Word = "STOPPED"
)

// Names of the virtio-serial ports the agent writes its words to
// (/dev/virtio-ports/<name> in the guest).
const (
	// PortCurrent is the port wired to the ring buffer in the current layout.
	PortCurrent = "com.canonical.lxd"
	// PortLegacy is the port wired to the ring buffer in the legacy layout; in
	// the current layout it exists unwired.
	PortLegacy = "org.linuxcontainers.lxd"
)

// MaxCarry is the largest partial line a Parser keeps between two Feed calls.
// A longer partial line cannot be a word and is dropped.
const MaxCarry = 64

// Known reports whether w is one of the words the agent writes.
func Known(w Word) bool {
	switch w {
	case Started, Connected, Stopped:
		return true
	}
	return false
}

// Format returns the bytes the agent writes for w: the word and a newline.
func Format(w Word) []byte {
	b := make([]byte, 0, len(w)+1)
	b = append(b, w...)
	return append(b, '\n')
}

// Parser turns successive ring reads into agent words. Only the last complete
// line of each read counts; unknown words, garbage, partial lines and empty
// reads change nothing. A partial trailing line (at most MaxCarry bytes of
// printable ASCII) is carried into the next Feed, so a word split across two
// reads is still recognised. The zero value is ready to use; a Parser is not
// safe for concurrent use.
type Parser struct {
	carry []byte
	// poisoned is set when a partial line was dropped: the rest of that
	// line, up to the next newline, cannot be a word.
	poisoned bool
}

// Feed consumes what one ring read returned. It returns the word of the last
// complete line if that line is a known word (a trailing "\r" is tolerated),
// else ("", false).
func (p *Parser) Feed(data []byte) (Word, bool) {
	if len(data) == 0 {
		return "", false
	}
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		p.keep(data, true)
		return "", false
	}
	// The last complete line starts after the previous newline in data, or,
	// if data holds a single newline, continues the carried partial line.
	var w Word
	if prev := bytes.LastIndexByte(data[:last], '\n'); prev >= 0 {
		w = lineWord(data[prev+1 : last])
	} else if !p.poisoned && len(p.carry)+last <= MaxCarry {
		w = lineWord(append(p.carry, data[:last]...))
	}
	p.poisoned = false
	p.keep(data[last+1:], false)
	if !Known(w) {
		return "", false
	}
	return w, true
}

// Clear reports whether the parser carries nothing into the next Feed (no
// partial line, none dropped): a read of exactly one complete line is then
// that line's word alone.
func (p *Parser) Clear() bool { return len(p.carry) == 0 && !p.poisoned }

// IsLine reports whether data is exactly the line of w: "WORD\n" (or
// "WORD\r\n", as Feed tolerates).
func IsLine(data []byte, w Word) bool {
	data, ok := bytes.CutSuffix(data, []byte{'\n'})
	if !ok {
		return false
	}
	data = bytes.TrimSuffix(data, []byte{'\r'})
	return string(data) == string(w)
}

// lineWord returns the line without a trailing "\r" as a Word (a copy).
func lineWord(line []byte) Word {
	return Word(bytes.TrimSuffix(line, []byte{'\r'}))
}

// keep appends a partial trailing line to the carry, dropping the carry when
// it would overflow MaxCarry or holds anything but printable ASCII and "\r".
func (p *Parser) keep(part []byte, appendToCarry bool) {
	if !appendToCarry {
		p.carry = p.carry[:0]
	}
	if p.poisoned {
		return
	}
	if len(p.carry)+len(part) > MaxCarry || !printable(part) {
		p.carry = p.carry[:0]
		p.poisoned = true
		return
	}
	if p.carry == nil {
		p.carry = make([]byte, 0, MaxCarry)
	}
	p.carry = append(p.carry, part...)
}

func printable(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\r' {
			return false
		}
	}
	return true
}
