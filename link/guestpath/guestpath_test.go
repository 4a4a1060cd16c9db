package guestpath_test

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/link/guestpath"
)

// TestClean tries absolute, relative, NUL and ".." paths: the rule the
// daemon and the agent both apply.
func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"/", "."},
		{"/etc/hosts", "etc/hosts"},
		{"//etc///hosts/", "etc/hosts"},
		{"/./etc/.", "etc"},
	} {
		if got, err := guestpath.Clean(tc.in); err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "etc/hosts", "./etc", "/etc/../../host", "/a/../b", "/..", "/etc/ho\x00sts"} {
		if got, err := guestpath.Clean(bad); !errors.Is(err, guestpath.ErrInvalid) {
			t.Errorf("Clean(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
}
