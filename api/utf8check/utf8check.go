// Package utf8check finds text that is not valid UTF-8 before a JSON
// encoder or decoder silently turns it into U+FFFD: the daemon refuses
// such a request body (admin API, devlxd) and the CLI such a value, so
// what is stored is what was sent.
package utf8check

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Offset returns the byte offset of the first byte of b that does not
// start a valid UTF-8 sequence, or -1 when b is valid UTF-8.
func Offset(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// JSONOffset is Offset for a JSON text, which may also spell text that is
// not UTF-8 as an escape: a \uD800-\uDFFF escape not part of a surrogate
// pair (encoding/json decodes it to U+FFFD). It returns the offset of the
// first invalid byte or lone surrogate escape, or -1.
func JSONOffset(b []byte) int {
	if i := Offset(b); i >= 0 {
		return i
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return -1
	}
	// A backslash only appears inside strings in valid JSON; invalid JSON
	// is the decoder's to refuse.
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // an escaped character such as \\ or \"
			continue
		}
		r := hex4(b[i+2:])
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if r2 := hex4(b[i+8:]); r2 >= 0xDC00 && r2 < 0xE000 {
					i += 11
					continue
				}
			}
			return i
		case r >= 0xDC00 && r < 0xE000:
			return i
		}
		i += 5
	}
	return -1
}

// hex4 returns the value of the four hex digits at the start of b, or -1.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	v := 0
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// Body returns nil when a JSON request body is valid UTF-8 (JSONOffset),
// else the error the daemon answers with 400:
// "request body is not valid UTF-8 (byte offset N)".
func Body(b []byte) error {
	if i := JSONOffset(b); i >= 0 {
		return fmt.Errorf("request body is not valid UTF-8 (byte offset %d)", i)
	}
	return nil
}

// Value returns nil when s is valid UTF-8, else an error
// "not valid UTF-8 (byte offset N)" for the caller to name the value.
func Value(s string) error {
	if i := Offset([]byte(s)); i >= 0 {
		return fmt.Errorf("not valid UTF-8 (byte offset %d)", i)
	}
	return nil
}
