package ringwriter

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/link/ringproto"
)

// openFIFO creates a FIFO and opens it read-write, so that it always has a
// reader and a read blocks until data arrives.
func openFIFO(t *testing.T, path string) *bufio.Reader {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open fifo: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	_ = f.SetReadDeadline(time.Now().Add(30 * time.Second))
	return bufio.NewReader(f)
}

func TestWriter(t *testing.T) {
	tests := []struct {
		name  string
		ports []string
		want  string
	}{
		{"current", []string{ringproto.PortCurrent}, ringproto.PortCurrent},
		{"legacy only", []string{ringproto.PortLegacy}, ringproto.PortLegacy},
		{"both prefers current", []string{ringproto.PortLegacy, ringproto.PortCurrent}, ringproto.PortCurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			readers := map[string]*bufio.Reader{}
			for _, p := range tt.ports {
				readers[p] = openFIFO(t, filepath.Join(dir, p))
			}
			w := &Writer{Dir: dir}
			for _, word := range []ringproto.Word{ringproto.Started, ringproto.Connected, ringproto.Stopped} {
				if err := w.Write(word); err != nil {
					t.Fatalf("Write(%s): %v", word, err)
				}
				line, err := readers[tt.want].ReadString('\n')
				if err != nil || line != string(word)+"\n" {
					t.Fatalf("read = (%q, %v), want %q", line, err, word)
				}
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	t.Run("no port", func(t *testing.T) {
		w := &Writer{Dir: t.TempDir()}
		if err := w.Write(ringproto.Started); !errors.Is(err, ErrNoPort) {
			t.Fatalf("Write = %v, want ErrNoPort", err)
		}
	})
	t.Run("unwired port times out", func(t *testing.T) {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, ringproto.PortCurrent), 0o600); err != nil {
			t.Fatalf("mkfifo: %v", err)
		}
		w := &Writer{Dir: dir, Timeout: 100 * time.Millisecond}
		if err := w.Write(ringproto.Started); !errors.Is(err, syscall.ENXIO) {
			t.Fatalf("Write = %v, want ENXIO", err)
		}
	})
}
