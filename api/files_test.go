package api

import (
	"io/fs"
	"testing"
)

func TestFileMode(t *testing.T) {
	for _, tc := range []struct {
		text string
		mode fs.FileMode
	}{
		{"0644", 0o644},
		{"0755", 0o755},
		{"4755", 0o755 | fs.ModeSetuid},
		{"2775", 0o775 | fs.ModeSetgid},
		{"1777", 0o777 | fs.ModeSticky},
		{"7000", fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky},
	} {
		m, err := ParseFileMode(tc.text)
		if err != nil || m != tc.mode {
			t.Errorf("ParseFileMode(%q) = %v, %v; want %v", tc.text, m, err, tc.mode)
		}
		if got := FormatFileMode(tc.mode); got != tc.text {
			t.Errorf("FormatFileMode(%v) = %q, want %q", tc.mode, got, tc.text)
		}
	}
	// Not octal, too large, negative, empty: each refused.
	for _, bad := range []string{"", "8", "0o644", "10000", "-1", "rwx", "644 "} {
		if m, err := ParseFileMode(bad); err == nil {
			t.Errorf("ParseFileMode(%q) = %v, want an error", bad, m)
		}
	}
}
