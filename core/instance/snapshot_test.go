package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
)

// TestValidateSnapshotName checks LXD's snapshot name rules and
// guestlink's own (URL segment and file name safety).
func TestValidateSnapshotName(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string // "" = valid
	}{
		{"snap0", ""},
		{"before-upgrade_2026.11", ""},
		{"été", ""},
		{strings.Repeat("x", 63), ""},
		{"", "empty"},
		{strings.Repeat("x", 64), "64 bytes, the limit is 63"},
		{"a/b", "may not contain slashes"},
		{".", "invalid snapshot name"},
		{"..", "invalid snapshot name"},
		{".hidden", "may not start with '.'"},
		{"a b", "white space"},
		{"a\tb", "white space"},
		{"a\x00b", "control"},
		{"a?b", "?&+#%"},
		{"a%2f", "?&+#%"},
		{`a\b`, "?&+#%"},
		{"bad\xffutf8", "control"},
	} {
		err := ValidateSnapshotName(tc.name)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%q: %v, want valid", tc.name, err)
		case tc.msg != "" && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%q: %v, want invalid with %q", tc.name, err, tc.msg)
		}
	}
}
