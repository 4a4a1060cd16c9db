package transport

import (
	"errors"
	"testing"
)

// TestVSockParse checks, on any host, that "vsock" names the AF_VSOCK link
// and takes no argument. The link's Listen and Dial over real AF_VSOCK are
// TestVSockGuest (vsock_guest_test.go), which runs inside a guest.
func TestVSockParse(t *testing.T) {
	tests := []struct {
		spec    string
		wantErr error
	}{
		{"vsock", nil},
		{"vsock:3", ErrBadSpec}, // a CID or port in the spec: vsock has its own addressing
		{"vsock:", ErrBadSpec},
		{"vsocks", ErrUnknownLink},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			g, err := Parse(tt.spec)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want %v", tt.spec, g, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.spec, err)
			}
			if _, ok := g.(VSock); !ok || g.Kind() != "vsock" {
				t.Fatalf("Parse(%q) = %T (kind %q), want VSock", tt.spec, g, g.Kind())
			}
		})
	}
}
