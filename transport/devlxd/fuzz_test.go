package devlxd

import (
	"strings"
	"testing"
)

// FuzzDecodeState checks that no PATCH /1.0 body crashes the decoder and
// that every body is either one of the two states or a precise 400 message
// (a body that is not valid UTF-8 says where).
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{
		`{"state":"Ready"}`, `{"state":"Started"}`, `{"state":"ready"}`, `{"state":"Running"}`, ``, `{`,
		`{"state":1}`, `[]`, `null`, `{"state":"Ready"} trailing`, `{"state":"\u0000"}`, "\xff\xfe",
		`{"state":"Ready","state":"Started"}`, strings.Repeat("[", 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ready, err := DecodeState(body)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "Invalid request body: ") && !strings.HasPrefix(msg, "Invalid state \"") &&
				!strings.HasPrefix(msg, "request body is not valid UTF-8 (byte offset ") {
				t.Fatalf("imprecise error %q", msg)
			}
			if ready {
				t.Fatal("ready with an error")
			}
		}
	})
}
