package oomwatch

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/console"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// reports is a Reporter that hands every report to the test.
type reports chan instance.OOMKill

func (r reports) ReportOOMKill(_ context.Context, uuid string, k instance.OOMKill) error {
	if uuid != "u1" {
		panic("report for " + uuid)
	}
	r <- k
	return nil
}

func (r reports) next(t *testing.T) instance.OOMKill {
	t.Helper()
	select {
	case k := <-r:
		return k
	case <-time.After(30 * time.Second):
		t.Fatal("no report")
		return instance.OOMKill{}
	}
}

func appendTo(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// TestWatcher follows a real console log: the lines before the watch began
// are not reported, a kill line written later is, once; 8 MiB of random
// bytes with no newline and a kill line cut in two by the writer neither
// stall nor lose the next kill; after GuestStopped nothing is read.
func TestWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	appendTo(t, path, []byte("[ 1.0] Out of memory: Killed process 1 (before) total-vm:1kB\n"))
	r := make(reports, 16)
	w := New(Config{Reporter: r, Poll: 10 * time.Millisecond})
	defer w.Close()
	inst := &instance.Instance{Name: "vm1", UUID: "u1", Details: map[string]string{console.DetailKey: path}}
	w.GuestRunning(inst)
	w.GuestRunning(inst) // again, as after a plugin restart: still one watch

	appendTo(t, path, []byte("booting\n[  189.3] Out of memory: Killed process 123 (localedef) total-vm:71544kB, anon-rss:59756kB\n"))
	if k := r.next(t); k.Process != "localedef" || k.PID != 123 || k.Count != 1 || k.Source != instance.OOMSourceConsole {
		t.Fatalf("report %+v, want localedef 123 from the console", k)
	}

	garbage := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	garbage = bytes.ReplaceAll(garbage, []byte("\n"), []byte("x"))
	appendTo(t, path, garbage)
	appendTo(t, path, []byte("\n[  200.0] Out of memory: Killed pro"))
	appendTo(t, path, []byte("cess 456 (apt-get) total-vm:1kB\n"))
	if k := r.next(t); k.Process != "apt-get" || k.PID != 456 {
		t.Fatalf("after garbage: report %+v, want apt-get 456", k)
	}

	w.GuestStopped(inst)
	w.GuestStopped(inst)
	appendTo(t, path, []byte("Out of memory: Killed process 789 (after) total-vm:1kB\n"))
	w.Close() // waits for the watch's goroutine: nothing can report after
	select {
	case k := <-r:
		t.Fatalf("report after GuestStopped: %+v", k)
	default:
	}
}

// TestWatcherNoLog: an instance without an absolute console log path
// starts no watch.
func TestWatcherNoLog(t *testing.T) {
	w := New(Config{Reporter: make(reports)})
	defer w.Close()
	for _, d := range []map[string]string{nil, {console.DetailKey: "relative/console.log"}} {
		w.GuestRunning(&instance.Instance{Name: "vm1", UUID: "u1", Details: d})
		if len(w.watches) != 0 {
			t.Fatalf("details %v: a watch started", d)
		}
	}
}
