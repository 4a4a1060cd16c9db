package adminapi

import (
	"net"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	lan := net.ParseIP("192.0.2.10")
	lo := net.ParseIP("127.0.0.1")
	extra := []string{"guestlink.example"}
	for _, tt := range []struct {
		host string
		la   net.IP
		ok   bool
	}{
		{"localhost", lan, true},
		{"LOCALHOST", lo, true},
		{"192.0.2.10", lan, true},
		{"192.0.2.11", lan, false}, // another address: a rebound name resolving there is refused
		{"127.0.0.1", lan, false},  // loopback names a different listener
		{"::ffff:192.0.2.10", lan, true},
		{"::1", lo, true},
		{"127.0.0.2", lo, true},
		{"guestlink.example", lan, true},
		{"GuestLink.Example", lo, true},
		{"evil.example", lan, false},
		{"evil.example", lo, false},
		{"guestlink.example.evil", lan, false},
	} {
		if got := hostAllowed(tt.host, tt.la, extra); got != tt.ok {
			t.Errorf("hostAllowed(%q on %s) = %v, want %v", tt.host, tt.la, got, tt.ok)
		}
	}
}
