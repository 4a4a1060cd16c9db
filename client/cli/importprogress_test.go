package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
)

// TestWatchImport follows a daemon's import of 4 MiB (a list that answers
// an error first, then another import beside ours, ours growing by 1 MiB
// a poll): on a terminal the bar shows the import's name and bytes, and
// its line is cleared when stopped; not on a terminal, the daemon is never
// asked and nothing is drawn.
func TestWatchImport(t *testing.T) {
	oldPoll, oldThrottle := importPoll, transferThrottle
	importPoll, transferThrottle = time.Millisecond, 0
	t.Cleanup(func() { importPoll, transferThrottle = oldPoll, oldThrottle })
	const path, total = "/srv/debian.img", 4 << 20
	for _, tty := range []bool{true, false} {
		t.Run(map[bool]string{true: "terminal", false: "not a terminal"}[tty], func(t *testing.T) {
			calls := 0
			full := make(chan struct{}) // closed once the list says the copy is done
			list := func(context.Context) ([]api.ImageImport, error) {
				if !tty {
					t.Error("a watch that draws nothing asked the daemon")
				}
				calls++
				if calls == 1 {
					return nil, errors.New("a hiccup")
				}
				done := min(int64(calls-1)<<20, total)
				if done == total && calls == 5 {
					close(full)
				}
				return []api.ImageImport{
					{Name: "other.img", Path: "/srv/other.img", Done: 1, Total: 100 << 20},
					{Name: "debian-12", Path: path, Alias: "debian-12", Done: done, Total: total},
				}, nil
			}
			var screen bytes.Buffer
			stop := watchImport(context.Background(), &screen, tty, path, list)
			if tty {
				<-full
			}
			stop()
			out := screen.String()
			if !tty {
				if out != "" {
					t.Fatalf("drew %q", out)
				}
				return
			}
			if !strings.Contains(out, "import debian-12") || !strings.Contains(out, "4.2 MB") || strings.Contains(out, "other") {
				t.Fatalf("progress %q: want our import's name and its 4 MiB", out)
			}
			if last := out[strings.LastIndex(out, "\r")+1:]; strings.TrimSpace(last) != "" {
				t.Fatalf("the bar's line is not cleared at the end: %q", last)
			}
		})
	}
}
