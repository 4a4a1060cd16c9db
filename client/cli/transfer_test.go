package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestTransfer copies 4 MiB through a transfer drawing on a buffer (a
// terminal) and through ones that must not draw (not a terminal; a file
// under 1 MiB): the first shows the description and bytes and ends with
// its line cleared, the others write nothing and hand back the stream
// itself.
func TestTransfer(t *testing.T) {
	data := bytes.Repeat([]byte("guestlink"), (4<<20)/9)
	old := transferThrottle
	transferThrottle = 0 // draw at every write: the copy takes milliseconds
	t.Cleanup(func() { transferThrottle = old })
	for _, tc := range []struct {
		name string
		tty  bool
		size int64
		pull bool // count on the writer's side (pull) instead of the reader's (push)
		draw bool
	}{
		{"push, terminal", true, int64(len(data)), false, true},
		{"pull, terminal, unknown size", true, -1, true, true},
		{"pull, terminal", true, int64(len(data)), true, true},
		{"push, not a terminal", false, int64(len(data)), false, false},
		{"pull, not a terminal", false, -1, true, false},
		{"push, terminal, small file", true, 1000, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var screen, got bytes.Buffer
			tr := newTransfer(&screen, tc.tty, tc.size, "push big.img")
			var r io.Reader = bytes.NewReader(data)
			var w io.Writer = &got
			if tc.pull {
				w = tr.writer(w)
			} else {
				r = tr.reader(r)
			}
			if !tc.draw && w != io.Writer(&got) {
				t.Fatal("a transfer that draws nothing wraps the output")
			}
			if _, err := io.Copy(w, r); err != nil {
				t.Fatal(err)
			}
			tr.done()
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("copied %d bytes, want %d", got.Len(), len(data))
			}
			out := screen.String()
			if !tc.draw {
				if out != "" {
					t.Fatalf("drew %q", out)
				}
				if tr.bar != nil {
					t.Fatal("a bar that draws nothing")
				}
				return
			}
			if !strings.Contains(out, "push big.img") || !strings.Contains(out, "MB") {
				t.Fatalf("progress %q: want the description and the bytes", out)
			}
			if last := out[strings.LastIndex(out, "\r")+1:]; strings.TrimSpace(last) != "" {
				t.Fatalf("the bar's line is not cleared at the end: %q", last)
			}
		})
	}
}
