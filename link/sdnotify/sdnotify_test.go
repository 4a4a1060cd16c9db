package sdnotify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/link/sdnotify"
)

// TestParse feeds the messages systemd 257 sends to vmm.notify_socket and
// kinds of garbage: what systemd sends parses, with READY=1 and
// STOPPING=1 told apart; garbage is ErrMalformed.
func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		ready    bool
		stopping bool
		status   string
		wantErr  bool
	}{
		{name: "ready", in: "READY=1", ready: true},
		{name: "ready with a final newline", in: "READY=1\n", ready: true},
		{name: "ready and status", in: "READY=1\nSTATUS=Startup finished in 1min 3s.\n", ready: true, status: "Startup finished in 1min 3s."},
		{name: "a unit became active", in: "X_SYSTEMD_UNIT_ACTIVE=multi-user.target\n"},
		{name: "hostname", in: "X_SYSTEMD_HOSTNAME=debian"},
		{name: "stopping is not ready", in: "STOPPING=1\n", stopping: true},
		{name: "ready=0 is not ready", in: "READY=0"},
		{name: "the last assignment counts", in: "READY=1\nREADY=0", ready: false},
		{name: "value with '='", in: "STATUS=a=b", status: "a=b"},
		{name: "value with a tab", in: "STATUS=a\tb", status: "a\tb"},
		{name: "empty", in: "", wantErr: true},
		{name: "only newlines", in: "\n\n", wantErr: true},
		{name: "no '='", in: "READY", wantErr: true},
		{name: "lower-case key", in: "ready=1", wantErr: true},
		{name: "key starting with a digit", in: "1READY=1", wantErr: true},
		{name: "empty key", in: "=1", wantErr: true},
		{name: "key too long", in: strings.Repeat("K", 65) + "=1", wantErr: true},
		{name: "NUL in the value", in: "READY=1\x00", wantErr: true},
		{name: "escape in the value", in: "STATUS=\x1b[31m", wantErr: true},
		{name: "not UTF-8", in: "STATUS=\xff\xfe", wantErr: true},
		{name: "binary", in: "\x00\x01\x02\x03", wantErr: true},
		{name: "too large", in: "READY=1\nSTATUS=" + strings.Repeat("x", sdnotify.MaxMessage), wantErr: true},
		{name: "too many assignments", in: strings.Repeat("A=1\n", 65), wantErr: true},
		{name: "an HTTP request", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := sdnotify.Parse([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, sdnotify.ErrMalformed) {
					t.Fatalf("Parse(%q) = %+v, %v; want ErrMalformed", tt.in, m, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if m.Ready() != tt.ready || m.Stopping() != tt.stopping {
				t.Errorf("Parse(%q): ready %v stopping %v, want %v %v", tt.in, m.Ready(), m.Stopping(), tt.ready, tt.stopping)
			}
			if st, _ := m.Get("STATUS"); st != tt.status {
				t.Errorf("Parse(%q): STATUS %q, want %q", tt.in, st, tt.status)
			}
		})
	}
}

// TestCredential checks the OEM string against the form systemd reads
// (io.systemd.credential:NAME=VALUE) and the stream address.
func TestCredential(t *testing.T) {
	if got, want := sdnotify.Credential(sdnotify.Port), "io.systemd.credential:vmm.notify_socket=vsock-stream:2:8442"; got != want {
		t.Fatalf("Credential = %q, want %q", got, want)
	}
}

// FuzzParse checks that no input panics and that whatever parses is within
// the bounds Parse promises.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"READY=1", "READY=1\nSTATUS=ok\n", "STOPPING=1", "X_SYSTEMD_UNIT_ACTIVE=a.target", "", "=", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := sdnotify.Parse(b)
		if err != nil {
			if !errors.Is(err, sdnotify.ErrMalformed) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		if len(b) > sdnotify.MaxMessage || len(m.Fields) == 0 {
			t.Fatalf("accepted %d bytes with %d fields", len(b), len(m.Fields))
		}
		for _, f := range m.Fields {
			if strings.ContainsAny(f.Key+f.Value, "\n\x00") {
				t.Fatalf("field %q=%q holds a newline or NUL", f.Key, f.Value)
			}
		}
	})
}
