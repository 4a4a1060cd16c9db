package hostfwd

import (
	"slices"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk/hostfwd/hostfwdtest"
)

// TestParse feeds Parse good and bad values: good ones come back with the
// host address explicit, bad ones are refused naming the rule and why.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"loopback by default", "tcp::2222-:22", []string{"tcp:127.0.0.1:2222-:22"}},
		{"commas and spaces", "tcp:10.0.0.1:80-10.0.2.15:8080, udp::5353-:53", []string{"tcp:10.0.0.1:80-10.0.2.15:8080", "udp:127.0.0.1:5353-:53"}},
		{"same port, two protocols", "tcp::53-:53 udp::53-:53", []string{"tcp:127.0.0.1:53-:53", "udp:127.0.0.1:53-:53"}},
		{"edge ports", "tcp::1-:65535", []string{"tcp:127.0.0.1:1-:65535"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
	for _, tc := range hostfwdtest.Refused {
		t.Run(tc.Name, func(t *testing.T) {
			got, err := Parse(tc.Value)
			if err == nil || err.Error() != tc.Reason {
				t.Errorf("Parse(%q) = %q, %v; want the error %q", tc.Value, got, err, tc.Reason)
			}
		})
	}
	for _, v := range hostfwdtest.Accepted {
		if _, err := Parse(v); err != nil {
			t.Errorf("Parse(%q): %v", v, err)
		}
	}
}
