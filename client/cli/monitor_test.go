package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guestlink/guestlink/client/cli"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// syncBuffer is a buffer safe for a writer and a concurrent reader; a
// reader can wait for the next write.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed (and replaced) at each write
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.buf.Write(p)
}

// snapshot returns what was written and a channel closed at the next write.
func (b *syncBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = make(chan struct{})
	}
	return b.buf.String(), b.written
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// monitor runs "guestlink monitor args..." until stop is called; stop
// returns the exit code and stderr.
func monitor(t *testing.T, srv *apitest.Server, out *syncBuffer, args ...string) (stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(ctx, append([]string{"--state-dir", srv.Dir, "monitor"}, args...), out, &errb)
	}()
	return func() (int, string) {
		cancel()
		select {
		case code := <-done:
			return code, errb.String()
		case <-time.After(30 * time.Second):
			t.Fatal("monitor did not stop")
			return -1, ""
		}
	}
}

// waitFor waits until the buffer holds n lines.
func waitFor(t *testing.T, b *syncBuffer, n int) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		s, written := b.snapshot()
		if strings.Count(s, "\n") >= n {
			return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		}
		select {
		case <-written:
		case <-timeout:
			t.Fatalf("waiting for %d lines, got:\n%s", n, b.String())
			return nil
		}
	}
}

func TestMonitor(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	ok(t, srv, "launch", "old", "--backend", "sim") // ids 1, 2

	t.Run("json lines with since", func(t *testing.T) {
		var out syncBuffer
		stop := monitor(t, srv, &out, "--format", "json", "--since", "1", "--instance", "old,new", "--type", "lifecycle")
		lines := waitFor(t, &out, 1) // the stored instance-started of "old"
		ok(t, srv, "launch", "new", "--backend", "sim")
		ok(t, srv, "launch", "other", "--backend", "sim")
		ok(t, srv, "stop", "new")
		lines = waitFor(t, &out, 4)
		if code, stderr := stop(); code != 0 || stderr != "" {
			t.Fatalf("monitor exit %d, stderr %q", code, stderr)
		}
		var got []string
		for _, l := range lines {
			var ev struct {
				ID       int64 `json:"id"`
				Metadata struct {
					Action string `json:"action"`
					Source string `json:"source"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, fmt.Sprintf("%d %s %s", ev.ID, ev.Metadata.Action, ev.Metadata.Source))
		}
		want := "2 instance-started /1.0/instances/old|3 instance-created /1.0/instances/new|4 instance-started /1.0/instances/new|" +
			"7 instance-stopped /1.0/instances/new"
		if strings.Join(got, "|") != want {
			t.Fatalf("monitor:\n%s\nwant:\n%s", strings.Join(got, "|"), want)
		}
	})

	t.Run("readable", func(t *testing.T) {
		var out syncBuffer
		stop := monitor(t, srv, &out, "--since", "5")
		lines := waitFor(t, &out, 2)
		if code, _ := stop(); code != 0 {
			t.Fatalf("monitor exit %d", code)
		}
		for i, want := range []string{" #6 lifecycle instance-started other by unix", " #7 lifecycle instance-stopped new by unix"} {
			if !strings.Contains(lines[i], want) {
				t.Fatalf("line %q lacks %q", lines[i], want)
			}
		}
	})

	t.Run("since 0 replays from the first event", func(t *testing.T) {
		var out syncBuffer
		stop := monitor(t, srv, &out, "--format", "json", "--since", "0", "--instance", "old")
		lines := waitFor(t, &out, 2)
		if code, stderr := stop(); code != 0 || stderr != "" {
			t.Fatalf("monitor exit %d, stderr %q", code, stderr)
		}
		for i, want := range []string{`"id":1,`, `"id":2,`} {
			if !strings.Contains(lines[i], want) {
				t.Fatalf("line %d %q lacks %s", i, lines[i], want)
			}
		}
	})

	t.Run("bad filter", func(t *testing.T) {
		fails(t, srv, `invalid event type "agent": must be lifecycle or logging`, "monitor", "--type", "agent")
		fails(t, srv, `invalid --since -2: must be a non-negative event id`, "monitor", "--since", "-2")
	})
}
