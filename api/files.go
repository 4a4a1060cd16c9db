package api

import (
	"fmt"
	"io/fs"
	"strconv"
)

// FormatFileMode writes a mode as LXD's X-LXD-mode header carries it: four
// octal digits, the setuid, setgid and sticky bits in the first.
func FormatFileMode(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

// ParseFileMode reads an X-LXD-mode value (octal, up to 07777) as
// FormatFileMode writes it. Its error names the value; callers wrap it
// with their own kind.
func ParseFileMode(s string) (fs.FileMode, error) {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("mode %q: want an octal mode up to 07777", s)
	}
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}
