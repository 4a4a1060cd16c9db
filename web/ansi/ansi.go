// Package ansi turns a terminal's byte stream (a guest's serial console)
// into plain text segments for a web page: SGR colour sequences become
// class names (ansi-fg-N, ansi-bg-N, ansi-bold), every other escape or
// control sequence is dropped, and invalid UTF-8 becomes U+FFFD. A Parser
// keeps its state between Feed calls, so a sequence or a character split
// across two reads is handled as if it came whole. The text is never
// markup: the page inserts it as text (templ escaping, textContent).
package ansi

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Segment is a run of text drawn with the same classes.
type Segment struct {
	// Class is a space-separated list of ansi-* classes ("" for plain).
	Class string `json:"c,omitempty"`
	Text  string `json:"t"`
}

type state uint8

const (
	ground    state = iota
	escape          // after ESC
	csi             // ESC [ ... final
	osc             // ESC ] ... BEL or ESC \
	oscEscape       // ESC inside an OSC
	escInter        // ESC + intermediate bytes, waiting for the final byte
)

// maxParams bounds a CSI sequence's parameter bytes; longer ones are
// dropped whole (no terminal sends them; a broken stream might).
const maxParams = 64

// Parser is the state of one stream. Its zero value is ready to use.
type Parser struct {
	st      state
	params  []byte
	pending []byte // an incomplete UTF-8 character at the end of the last Feed
	fg, bg  int    // -1: default; 0..255
	bold    bool
	init    bool
}

// Feed parses b and returns its text segments. Adjacent text with the same
// classes is one segment.
func (p *Parser) Feed(b []byte) []Segment {
	if !p.init {
		p.fg, p.bg, p.init = -1, -1, true
	}
	var out []Segment
	var text []byte
	flush := func() {
		if len(text) == 0 {
			return
		}
		s := strings.ToValidUTF8(string(text), "\uFFFD")
		text = text[:0]
		cls := p.class()
		if n := len(out); n > 0 && out[n-1].Class == cls {
			out[n-1].Text += s
			return
		}
		out = append(out, Segment{Class: cls, Text: s})
	}
	if len(p.pending) > 0 {
		b = append(p.pending, b...)
		p.pending = nil
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch p.st {
		case ground:
			switch {
			case c == 0x1b:
				p.st = escape
			case c == '\n' || c == '\t':
				text = append(text, c)
			case c < 0x20 || c == 0x7f:
				// \r, \b, BEL and the other controls draw nothing here.
			case c < 0x80:
				text = append(text, c)
			default:
				r, n := utf8.DecodeRune(b[i:])
				if r == utf8.RuneError && n <= 1 && !utf8.FullRune(b[i:]) {
					p.pending = append([]byte(nil), b[i:]...)
					i = len(b)
					continue
				}
				if r >= 0x80 && r <= 0x9f { // C1 controls
					i += n - 1
					continue
				}
				text = append(text, b[i:i+n]...)
				i += n - 1
			}
		case escape:
			switch {
			case c == '[':
				p.st, p.params = csi, p.params[:0]
			case c == ']':
				p.st = osc
			case c >= 0x20 && c <= 0x2f:
				p.st = escInter
			default:
				p.st = ground // a two-byte sequence (ESC 7, ESC c, ...)
			}
		case escInter:
			if c < 0x20 || c > 0x2f {
				p.st = ground
			}
		case csi:
			switch {
			case c >= 0x40 && c <= 0x7e:
				p.st = ground
				if c == 'm' && len(p.params) <= maxParams {
					flush()
					p.sgr(string(p.params))
				}
			case len(p.params) <= maxParams:
				p.params = append(p.params, c)
			}
		case osc:
			switch c {
			case 0x07:
				p.st = ground
			case 0x1b:
				p.st = oscEscape
			}
		case oscEscape:
			if c == '\\' {
				p.st = ground
			} else {
				p.st = osc
			}
		}
	}
	flush()
	return out
}

// sgr applies a Select Graphic Rendition sequence's parameters.
func (p *Parser) sgr(params string) {
	if params == "" {
		params = "0"
	}
	ps := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	for i := 0; i < len(ps); i++ {
		n, err := strconv.Atoi(ps[i])
		if err != nil {
			return // private or malformed: ignore the rest
		}
		switch {
		case n == 0:
			p.fg, p.bg, p.bold = -1, -1, false
		case n == 1:
			p.bold = true
		case n == 22:
			p.bold = false
		case n >= 30 && n <= 37:
			p.fg = n - 30
		case n >= 90 && n <= 97:
			p.fg = n - 90 + 8
		case n == 39:
			p.fg = -1
		case n >= 40 && n <= 47:
			p.bg = n - 40
		case n >= 100 && n <= 107:
			p.bg = n - 100 + 8
		case n == 49:
			p.bg = -1
		case n == 38 || n == 48:
			// 38;5;N (256 colours: the first 16 are kept) or 38;2;R;G;B
			// (true colour: dropped).
			if i+2 < len(ps) && ps[i+1] == "5" {
				if c, err := strconv.Atoi(ps[i+2]); err == nil && c >= 0 && c < 16 {
					if n == 38 {
						p.fg = c
					} else {
						p.bg = c
					}
				}
				i += 2
			} else if i+1 < len(ps) && ps[i+1] == "2" {
				i += 4
			}
		}
	}
}

// class returns the classes of the current rendition.
func (p *Parser) class() string {
	var cs []string
	if p.fg >= 0 {
		cs = append(cs, "ansi-fg-"+strconv.Itoa(p.fg))
	}
	if p.bg >= 0 {
		cs = append(cs, "ansi-bg-"+strconv.Itoa(p.bg))
	}
	if p.bold {
		cs = append(cs, "ansi-bold")
	}
	return strings.Join(cs, " ")
}
