package ansi

import (
	"reflect"
	"testing"
)

func TestFeed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []Segment
	}{
		{"plain", []string{"hello\n"}, []Segment{{"", "hello\n"}}},
		{"colour and reset", []string{"ok \x1b[32mgreen\x1b[0m done"}, []Segment{{"", "ok "}, {"ansi-fg-2", "green"}, {"", " done"}}},
		{"bold bright", []string{"\x1b[1;91mERR\x1b[m"}, []Segment{{"ansi-fg-9 ansi-bold", "ERR"}}},
		{"background", []string{"\x1b[44mx"}, []Segment{{"ansi-bg-4", "x"}}},
		{"256 colours", []string{"\x1b[38;5;3my\x1b[38;5;200mz"}, []Segment{{"ansi-fg-3", "yz"}}},
		{"true colour dropped", []string{"\x1b[38;2;1;2;3mz"}, []Segment{{"", "z"}}},
		{"sequence split across reads", []string{"a\x1b[3", "1mb"}, []Segment{{"", "a"}, {"ansi-fg-1", "b"}}},
		{"cursor and erase dropped", []string{"\x1b[2J\x1b[H\x1b[?25lhi\x1b[K"}, []Segment{{"", "hi"}}},
		{"osc title dropped", []string{"\x1b]0;title\x07a\x1b]2;t\x1b\\b"}, []Segment{{"", "ab"}}},
		{"controls dropped", []string{"a\r\nb\x08\x07\x00c\td"}, []Segment{{"", "a\nbc\td"}}},
		{"two-byte escapes", []string{"\x1b7a\x1b8\x1b(Bb\x1bc"}, []Segment{{"", "ab"}}},
		{"utf-8 split across reads", []string{"caf\xc3", "\xa9 \xe2\x9c", "\x93"}, []Segment{{"", "caf"}, {"", "é "}, {"", "✓"}}},
		{"invalid utf-8", []string{"a\xffb"}, []Segment{{"", "a\uFFFDb"}}},
		{"c1 control dropped", []string{"a\xc2\x9bb"}, []Segment{{"", "ab"}}},
		{"markup is text", []string{"<script>alert(1)</script>"}, []Segment{{"", "<script>alert(1)</script>"}}},
		{"overlong csi dropped", []string{"\x1b[" + string(make([]byte, 0)) + "1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;31mx"}, []Segment{{"", "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parser
			var got []Segment
			for _, c := range tc.chunks {
				got = append(got, p.Feed([]byte(c))...)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzFeed(f *testing.F) {
	f.Add([]byte("\x1b[31mred\x1b[0m\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parser
		for _, s := range p.Feed(b) {
			for _, r := range s.Text {
				if r == 0x1b || (r < 0x20 && r != '\n' && r != '\t') {
					t.Fatalf("control %U in output %q", r, s.Text)
				}
			}
		}
	})
}
