package ringproto

import (
	"bytes"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		word Word
		want string
	}{
		{Started, "STARTED\n"},
		{Connected, "CONNECTED\n"},
		{Stopped, "STOPPED\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.word), func(t *testing.T) {
			if got := string(Format(tt.word)); got != tt.want {
				t.Fatalf("Format(%q) = %q, want %q", tt.word, got, tt.want)
			}
		})
	}
}

func TestParserSingleFeed(t *testing.T) {
	tests := []struct {
		name   string
		data   string
		want   Word
		wantOK bool
	}{
		{"started", "STARTED\n", Started, true},
		{"connected", "CONNECTED\n", Connected, true},
		{"stopped", "STOPPED\n", Stopped, true},
		{"crlf", "STARTED\r\n", Started, true},
		{"last line wins", "STARTED\nCONNECTED\n", Connected, true},
		{"last line unknown", "CONNECTED\nHELLO\n", "", false},
		{"partial after complete", "STOPPED\nSTAR", Stopped, true},
		{"partial only", "STARTED", "", false},
		{"empty", "", "", false},
		{"lone newline", "\n", "", false},
		{"lower case", "started\n", "", false},
		{"leading space", " STARTED\n", "", false},
		{"trailing space", "STARTED \n", "", false},
		{"overwritten head", "ARTED\n", "", false},
		{"double cr", "STARTED\r\r\n", "", false},
		{"nul", "STARTED\x00\n", "", false},
		{"garbage then word", "\xff\xfe\x00\nSTOPPED\n", Stopped, true},
		{"word then empty line", "STARTED\n\n", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parser
			got, ok := p.Feed([]byte(tt.data))
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("Feed(%q) = (%q, %v), want (%q, %v)", tt.data, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParserSequence(t *testing.T) {
	type step struct {
		data   string
		want   Word
		wantOK bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"split word", []step{{"STA", "", false}, {"RTED\n", Started, true}}},
		{"split before newline", []step{{"CONNECTED", "", false}, {"\n", Connected, true}}},
		{"split in three", []step{{"ST", "", false}, {"OPP", "", false}, {"ED\r\n", Stopped, true}}},
		{"empty read keeps carry", []step{{"STA", "", false}, {"", "", false}, {"RTED\n", Started, true}}},
		{"carry replaced by next partial", []step{{"STOPPED\nSTA", Stopped, true}, {"RTED\n", Started, true}}},
		{"carry not used when read has two lines", []step{{"XX", "", false}, {"Y\nSTOPPED\n", Stopped, true}}},
		{"garbage drops carry", []step{{"\x01", "", false}, {"STARTED\n", "", false}, {"STARTED\n", Started, true}}},
		{"overflow drops carry", []step{{strings.Repeat("A", MaxCarry+1), "", false}, {"STARTED\n", "", false}, {"STOPPED\n", Stopped, true}}},
		{"overflow across reads", []step{{strings.Repeat("A", 40), "", false}, {strings.Repeat("B", 40), "", false}, {"STARTED\n", "", false}}},
		{"carry at cap", []step{{strings.Repeat("A", MaxCarry-2), "", false}, {"X\n", "", false}, {"STOPPED\n", Stopped, true}}},
		{"unknown then nothing changes", []step{{"STARTED\n", Started, true}, {"NOPE\n", "", false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parser
			for i, s := range tt.steps {
				got, ok := p.Feed([]byte(s.data))
				if got != s.want || ok != s.wantOK {
					t.Fatalf("step %d: Feed(%q) = (%q, %v), want (%q, %v)", i, s.data, got, ok, s.want, s.wantOK)
				}
			}
		})
	}
}

// model answers, for a whole stream split into reads, what the last complete
// line of each read is when the stream is seen as one text: the parser must
// report a word exactly when that full line (without a trailing "\r") is a
// known word.
func model(history, data []byte) (Word, bool) {
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		return "", false
	}
	all := append(append([]byte{}, history...), data[:last]...)
	line := all[bytes.LastIndexByte(all, '\n')+1:]
	w := Word(bytes.TrimSuffix(line, []byte{'\r'}))
	return w, Known(w)
}

func FuzzParser(f *testing.F) {
	f.Add([]byte("STARTED\n"), []byte{3})
	f.Add([]byte("STARTED\r\nCONNECTED\nSTOP"), []byte{1, 5, 9})
	f.Add([]byte("\xffSTOPPED\n"), []byte{0, 2})
	f.Add([]byte(strings.Repeat("Z", 70)+"STARTED\n"), []byte{60, 12})
	f.Fuzz(func(t *testing.T, stream []byte, cuts []byte) {
		var p Parser
		var history []byte
		rest := stream
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) && int(cuts[i]) < n {
				n = int(cuts[i])
			}
			chunk := rest[:n]
			rest = rest[n:]
			got, ok := p.Feed(chunk)
			want, wantOK := model(history, chunk)
			if ok != wantOK || (ok && got != want) {
				t.Fatalf("read %d %q after %q: Feed = (%q, %v), model = (%q, %v)", i, chunk, history, got, ok, want, wantOK)
			}
			if !ok && got != "" {
				t.Fatalf("Feed returned word %q with ok=false", got)
			}
			if len(p.carry) > MaxCarry {
				t.Fatalf("carry grew to %d bytes", len(p.carry))
			}
			history = append(history, chunk...)
			if len(chunk) == 0 {
				break
			}
		}
	})
}
