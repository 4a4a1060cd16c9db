// Package oomkill recognises the Linux kernel's report of a process its
// OOM killer killed for want of memory ("Out of memory: Killed process 123
// (localedef) ...") in a guest's console output, and cuts a console stream
// into bounded lines to look for it.
package oomkill

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kill is one process the guest's kernel killed for want of memory.
type Kill struct {
	PID     int
	Process string // the task's comm (at most MaxProcess bytes, printable)
	Cgroup  bool   // a memory cgroup's limit, not the whole guest, was hit
}

// MaxProcess bounds Kill.Process: the kernel's comm is 15 bytes, a longer
// name is not the kernel's.
const MaxProcess = 64

var (
	killed      = []byte("Killed process ")
	outOfMemory = []byte("out of memory:")
	cgroupOOM   = []byte("memory cgroup out of memory:")
)

// Parse reports whether line is the kernel's report of an OOM kill, and
// which. It knows every form since Linux 3.x: the one-line report of 5.x
// and later ("Out of memory: Killed process 123 (name) total-vm:..."), the
// "Killed process 123 (name) total-vm:..." line that follows 3.x and 4.x's
// "Out of memory: Kill process ... or sacrifice child" (which is not
// itself a kill), and the memory cgroup's "Memory cgroup out of memory:"
// of either. A line may start with a printk timestamp ("[  189.123456]"),
// a caller id ("[ T1234]"), a syslog level ("<3>") and "kernel: ", and end
// in "\r". Anything else, binary garbage included, is not a kill.
func Parse(line []byte) (Kill, bool) {
	rest := bytes.TrimSpace(line)
	rest = skipPrefixes(rest)
	i := bytes.Index(rest, killed)
	if i < 0 {
		return Kill{}, false
	}
	head := bytes.TrimSpace(rest[:i])
	k := Kill{}
	switch {
	case len(head) == 0:
	case asciiEqualFold(head, cgroupOOM):
		k.Cgroup = true
	case asciiEqualFold(head, outOfMemory):
	default:
		return Kill{}, false
	}
	rest = rest[i+len(killed):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j == 0 || j > 10 {
		return Kill{}, false
	}
	pid, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return Kill{}, false
	}
	rest = rest[j:]
	if !bytes.HasPrefix(rest, []byte(" (")) {
		return Kill{}, false
	}
	rest = rest[2:]
	// comm may hold spaces and parentheses: it ends at the ") " before
	// the sizes, or at the line's last ")".
	end := bytes.Index(rest, []byte(") total-vm:"))
	if end < 0 {
		end = bytes.LastIndexByte(rest, ')')
	}
	if end <= 0 {
		return Kill{}, false
	}
	k.PID, k.Process = pid, printable(rest[:end])
	return k, true
}

// skipPrefixes drops what may precede a kernel message on a console: a
// syslog level, printk's bracketed timestamp and caller id, "kernel:".
func skipPrefixes(b []byte) []byte {
	for {
		b = bytes.TrimLeft(b, " \t")
		switch {
		case len(b) > 2 && b[0] == '<':
			end := bytes.IndexByte(b, '>')
			if end < 2 || end > 4 || !digits(b[1:end]) {
				return b
			}
			b = b[end+1:]
		case len(b) > 1 && b[0] == '[':
			end := bytes.IndexByte(b, ']')
			if end < 0 || end > 24 {
				return b
			}
			b = b[end+1:]
		case bytes.HasPrefix(b, []byte("kernel:")):
			b = b[len("kernel:"):]
		default:
			return b
		}
	}
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func asciiEqualFold(a, b []byte) bool {
	return len(a) == len(b) && strings.EqualFold(string(a), string(b))
}

// printable returns b as valid UTF-8 of at most MaxProcess bytes with
// control characters replaced by '?'.
func printable(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		if sb.Len()+utf8.RuneLen(r) > MaxProcess {
			break
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// MaxLine is the longest line a Lines gives whole; the kernel's OOM line
// is about 200 bytes.
const MaxLine = 1024

// Lines cuts a stream, written to it in pieces of any size, into lines. It
// keeps at most MaxLine bytes: a longer line is given cut to its first
// MaxLine bytes, once, and the rest of it is dropped. The zero value is
// ready to use.
type Lines struct {
	buf  []byte
	long bool // the current line passed MaxLine and was given already
}

// Write calls fn with every line p completes, without its "\n" and "\r".
// The line passed to fn is only valid during the call.
func (l *Lines) Write(p []byte, fn func(line []byte)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		piece := p
		if i >= 0 {
			piece = p[:i]
		}
		if !l.long {
			room := MaxLine - len(l.buf)
			if len(piece) > room {
				l.buf = append(l.buf, piece[:room]...)
				fn(bytes.TrimRight(l.buf, "\r"))
				l.buf, l.long = l.buf[:0], true
			} else {
				l.buf = append(l.buf, piece...)
			}
		}
		if i < 0 {
			return
		}
		if !l.long {
			fn(bytes.TrimRight(l.buf, "\r"))
		}
		l.buf, l.long = l.buf[:0], false
		p = p[i+1:]
	}
}

// Reset forgets a partial line (the log was read again from its start).
func (l *Lines) Reset() { l.buf, l.long = l.buf[:0], false }
