package console

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		size, offset, tail, limit int64
		want                      Range
	}{
		{"whole", 100, 0, 0, 0, Range{0, 100, 100}},
		{"offset", 100, 40, 0, 0, Range{40, 100, 100}},
		{"offset past end", 100, 400, 0, 0, Range{100, 100, 100}},
		{"negative offset", 100, -5, 0, 0, Range{0, 100, 100}},
		{"tail", 100, 0, 10, 0, Range{90, 100, 100}},
		{"tail longer than log", 100, 0, 1000, 0, Range{0, 100, 100}},
		{"limit", 100, 10, 0, 20, Range{10, 30, 100}},
		{"tail and limit", 100, 0, 50, 20, Range{50, 70, 100}},
		{"empty log", 0, 10, 10, 10, Range{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Span(tc.size, tc.offset, tc.tail, tc.limit); got != tc.want {
				t.Fatalf("Span(%d, %d, %d, %d) = %+v, want %+v", tc.size, tc.offset, tc.tail, tc.limit, got, tc.want)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	t.Run("missing log reads empty", func(t *testing.T) {
		r, rg, err := Open(path, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		if len(b) != 0 || rg != (Range{}) {
			t.Fatalf("got %q %+v, want empty", b, rg)
		}
	})
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, rg, err := Open(path, 0, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Bytes written after Open are not part of the range.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("later")
	f.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "6789" || rg != (Range{6, 10, 10}) {
		t.Fatalf("got %q %+v, want 6789 {6 10 10}", b, rg)
	}
}

// follower runs Follow in the background and collects what it reads.
type follower struct {
	ch     chan string
	skips  chan int64
	done   chan error
	cancel context.CancelFunc
}

func follow(t *testing.T, path string, offset int64, opts FollowOptions) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fl := &follower{ch: make(chan string, 1024), skips: make(chan int64, 1024), done: make(chan error, 1), cancel: cancel}
	if opts.Poll == 0 {
		opts.Poll = 5 * time.Millisecond
	}
	go func() {
		fl.done <- Follow(ctx, path, offset, opts, func(c Chunk) error {
			if c.Skipped > 0 {
				fl.skips <- c.Skipped
			}
			fl.ch <- string(c.Data)
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-fl.done })
	return fl
}

// waitFor reads until the collected text contains want.
func (fl *follower) waitFor(t *testing.T, want string) string {
	t.Helper()
	var got strings.Builder
	deadline := time.After(30 * time.Second)
	for !strings.Contains(got.String(), want) {
		select {
		case s := <-fl.ch:
			got.WriteString(s)
		case <-deadline:
			t.Fatalf("no %q in %q", want, got.String())
		}
	}
	return got.String()
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestFollow(t *testing.T) {
	t.Run("waits for the log, then reads what is written", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		fl := follow(t, path, 0, FollowOptions{Chunk: 4})
		appendTo(t, path, "boot line 1\n")
		fl.waitFor(t, "boot line 1\n")
		appendTo(t, path, "boot line 2\n")
		if got := fl.waitFor(t, "line 2\n"); got != "boot line 2\n" {
			t.Fatalf("second read %q, want only the new line", got)
		}
	})
	t.Run("from an offset", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, "old\nnew\n")
		fl := follow(t, path, 4, FollowOptions{})
		if got := fl.waitFor(t, "new\n"); got != "new\n" {
			t.Fatalf("read %q, want new\\n", got)
		}
	})
	t.Run("truncated log is read from its start", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, "first boot, a long line\n")
		fl := follow(t, path, 0, FollowOptions{})
		fl.waitFor(t, "long line\n")
		if err := os.WriteFile(path, []byte("2nd\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fl.waitFor(t, "2nd\n")
	})
	t.Run("replaced log is read from its start", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "console.log")
		appendTo(t, path, "first\n")
		fl := follow(t, path, 0, FollowOptions{})
		fl.waitFor(t, "first\n")
		tmp := filepath.Join(dir, "new")
		appendTo(t, tmp, "replacement, longer than the first\n")
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		fl.waitFor(t, "replacement, longer than the first\n")
	})
	t.Run("lag is bounded", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, strings.Repeat("x", 1000)+"END")
		fl := follow(t, path, 0, FollowOptions{MaxLag: 10})
		if got := fl.waitFor(t, "END"); got != "xxxxxxxEND" {
			t.Fatalf("read %q, want the last 10 bytes", got)
		}
		if s := <-fl.skips; s != 993 {
			t.Fatalf("skipped %d, want 993", s)
		}
	})
	t.Run("removed log ends the stream", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, "bye\n")
		fl := follow(t, path, 0, FollowOptions{})
		fl.waitFor(t, "bye\n")
		os.Remove(path)
		select {
		case err := <-fl.done:
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Follow = %v, want fs.ErrNotExist", err)
			}
			fl.done <- err
		case <-time.After(30 * time.Second):
			t.Fatal("Follow did not end")
		}
	})
	t.Run("idle is called when nothing is new, and its error ends the stream", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, "quiet")
		gone := errors.New("heartbeat failed")
		var got string
		err := Follow(context.Background(), path, 0, FollowOptions{Poll: time.Millisecond, Idle: func() error { return gone }}, func(c Chunk) error {
			got += string(c.Data)
			return nil
		})
		if !errors.Is(err, gone) || got != "quiet" {
			t.Fatalf("Follow = %v after %q, want %v after quiet", err, got, gone)
		}
	})
	t.Run("fn error ends the stream", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "console.log")
		appendTo(t, path, "x")
		boom := errors.New("client gone")
		err := Follow(context.Background(), path, 0, FollowOptions{Poll: time.Millisecond}, func(Chunk) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Follow = %v, want %v", err, boom)
		}
	})
}

// BenchmarkFollow measures following a log written as fast as possible: the
// allocations per op stay constant (one buffer), whatever is read.
func BenchmarkFollow(b *testing.B) {
	path := filepath.Join(b.TempDir(), "console.log")
	line := bytes.Repeat([]byte("x"), 1<<20)
	if err := os.WriteFile(path, line, 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var n int
		Follow(ctx, path, 0, FollowOptions{}, func(c Chunk) error {
			n += len(c.Data)
			if n >= len(line) {
				cancel()
			}
			return nil
		})
		cancel()
	}
}
