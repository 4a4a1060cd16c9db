package hybrid

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestHostPath(t *testing.T) {
	if got, want := HostPath("/run/vm/v.sock", 1024), "/run/vm/v.sock_1024"; got != want {
		t.Fatalf("HostPath = %q, want %q", got, want)
	}
}

func TestDialListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	pl := l.Port(8443)
	if l.Port(8443) != pl {
		t.Fatalf("Port(8443) twice returned different listeners")
	}
	go func() {
		c, err := pl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, 8443)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	// Bytes sent right after the handshake must reach the port's listener.
	msg := []byte("hello\nworld")
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("ReadFull: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo = %q, want %q", got, msg)
	}

	t.Run("unserved port", func(t *testing.T) {
		_, err := Dial(ctx, path, 9999)
		if !errors.Is(err, ErrNotListening) {
			t.Fatalf("Dial unserved port: %v, want ErrNotListening", err)
		}
	})
	t.Run("closed port listener", func(t *testing.T) {
		p := l.Port(7000)
		p.Close()
		if _, err := p.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
		if _, err := Dial(ctx, path, 7000); !errors.Is(err, ErrNotListening) {
			t.Fatalf("Dial closed port: %v, want ErrNotListening", err)
		}
	})
	t.Run("no socket", func(t *testing.T) {
		_, err := Dial(ctx, path+".missing", 8443)
		if err == nil || errors.Is(err, ErrNotListening) {
			t.Fatalf("Dial missing socket: %v, want a dial error", err)
		}
	})
}

// fakeVMM answers every connection with reply after reading the CONNECT line
// (or holds it open when hold is set).
func fakeVMM(t *testing.T, reply string, hold bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := readLine(c); err != nil {
					return
				}
				_, _ = c.Write([]byte(reply))
				if hold {
					<-done
				}
			}()
		}
	}()
	return path
}

func TestDialBadAnswers(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		hold  bool
		want  error
	}{
		{"eof", "", false, ErrNotListening},
		{"wrong word", "NOPE 1\n", false, ErrBadHandshake},
		{"not a number", "OK abc\n", false, ErrBadHandshake},
		{"overflow", "OK 4294967296\n", false, ErrBadHandshake},
		{"no newline then eof", "OK 12", false, ErrBadHandshake},
		{"too long", "OK 111111111111111111111111111111111111\n", true, ErrBadHandshake},
		{"silent", "", true, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fakeVMM(t, tt.reply, tt.hold)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			c, err := Dial(ctx, path, 8443)
			if c != nil {
				c.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Dial = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestListenerDropsBadRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	l.Port(8443)
	for _, req := range []string{"HELLO\n", "CONNECT\n", "CONNECT x\n", "CONNECT 8443 \n", "connect 8443\n"} {
		t.Run(req, func(t *testing.T) {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatalf("write: %v", err)
			}
			b, err := io.ReadAll(c)
			if err != nil || len(b) != 0 {
				t.Fatalf("answer to %q = (%q, %v), want a silent close", req, b, err)
			}
		})
	}
}

var lineRE = regexp.MustCompile(`^(CONNECT|OK) ([0-9]+)\n$`)

func FuzzHandshake(f *testing.F) {
	for _, s := range []string{"CONNECT 8443\n", "OK 1073741824\n", "CONNECT 4294967295\n", "CONNECT 4294967296\n", "OK -1\n", "OK  1\n", "CONNECT 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, tc := range []struct {
			prefix string
			parse  func([]byte) (uint32, error)
			format func(uint32) []byte
		}{{"CONNECT", ParseConnect, FormatConnect}, {"OK", ParseOK, FormatOK}} {
			n, err := tc.parse(line)
			m := lineRE.FindSubmatch(line)
			valid := m != nil && string(m[1]) == tc.prefix && len(line) <= MaxLine
			if valid {
				if v, perr := strconv.ParseUint(string(m[2]), 10, 32); perr != nil {
					valid = false
				} else if err == nil && uint32(v) != n {
					t.Fatalf("parse %q = %d, want %d", line, n, v)
				}
			}
			if valid != (err == nil) {
				t.Fatalf("parse %s %q: err = %v, valid = %v", tc.prefix, line, err, valid)
			}
			if err != nil && !errors.Is(err, ErrBadHandshake) {
				t.Fatalf("error %v does not wrap ErrBadHandshake", err)
			}
			if err == nil {
				if back, err := tc.parse(tc.format(n)); err != nil || back != n {
					t.Fatalf("round trip of %d = (%d, %v)", n, back, err)
				}
			}
			// The reader never consumes past MaxLine or the newline.
			r := bytes.NewReader(line)
			got, _ := readLine(r)
			if len(got) > MaxLine || (bytes.IndexByte(got, '\n') >= 0 && bytes.IndexByte(got, '\n') != len(got)-1) {
				t.Fatalf("readLine(%q) = %q", line, got)
			}
		}
	})
}
