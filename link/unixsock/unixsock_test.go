package unixsock

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestListen listens under a permissive umask (the socket must still never
// be wider than asked) and under one that takes bits of the mode away (the
// socket must still get its whole mode, bound in a private directory and
// linked into place); where the umask leaves the mode whole the socket is
// bound at its path itself, so its close frees no removed directory.
func TestListen(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	// A directory long enough that a temporary name beside the socket
	// overflows sun_path, whatever TMPDIR is.
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", max(1, 90-len(base))))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		base string
		mode fs.FileMode
		// umask is the process's umask during Listen; linked is whether
		// the umask takes bits of mode away, so the socket is bound in a
		// private directory and linked into place.
		umask  int
		linked bool
	}{
		{"0600", t.TempDir(), "s.sock", 0o600, 0, false},
		{"0660", t.TempDir(), "unix.socket", 0o660, 0, false},
		{"0600 under umask 022", t.TempDir(), "s.sock", 0o600, 0o022, false},
		{"0660 under umask 022", t.TempDir(), "unix.socket", 0o660, 0o022, true},
		{"0660 under umask 077", t.TempDir(), "unix.socket", 0o660, 0o077, true},
		{"name too long for sun_path", long, strings.Repeat("x", 107-len(long)-1), 0o600, 0, false},
		{"temporary name too long for sun_path", long, strings.Repeat("x", 107-len(long)-1), 0o660, 0o022, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(tt.dir, tt.base)
			syscall.Umask(tt.umask)
			ln, err := Listen(path, tt.mode)
			syscall.Umask(0)
			if err != nil {
				t.Fatal(err)
			}
			// The name the kernel bound: the path (or its base
			// through /proc/self/fd), a temporary name only when the
			// umask narrowed the mode.
			bound := ln.(*listener).UnixListener.Addr().String()
			if got := filepath.Base(bound) != tt.base; got != tt.linked {
				t.Fatalf("socket bound as %q: under a temporary name %v, want %v", bound, got, tt.linked)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != tt.mode {
				t.Fatalf("socket mode %v, want a socket with %v", fi.Mode(), tt.mode)
			}
			if got := ln.Addr().String(); got != path {
				t.Fatalf("Addr %q, want %q", got, path)
			}
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Write([]byte("x"))
					c.Close()
				}
			}()
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			if _, err := c.Read(b); err != nil || b[0] != 'x' {
				t.Fatalf("read %q, %v", b, err)
			}
			c.Close()
			if _, err := Listen(path, tt.mode); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("second Listen on %s: %v, want ErrExist", path, err)
			}
			if err := ln.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("socket left after Close: %v", err)
			}
			entries, err := os.ReadDir(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 0 {
				t.Fatalf("left behind in %s: %v", tt.dir, entries)
			}
		})
	}
}

func TestSetUnlinkOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("socket kept after Close with SetUnlinkOnClose(false): %v, %v", fi, err)
	}
}

func TestListenRefusesFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Listen over a file: %v, want ErrExist", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep" {
		t.Fatalf("the file was touched: %q, %v", b, err)
	}
}
