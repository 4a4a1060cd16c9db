package instance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/guestlink/guestlink/errdefs"
)

// Bounds of an instance's config. Everything a guest can read of its
// config must reach it whole: the agent takes guest events (POST
// /1.0/events, a config event carrying a key's old and new value) up to
// agent/control.MaxEventBody (1 MiB) and proxies devlxd answers up to
// agent/upstream.MaxResponse (32 MiB). A value of MaxValueLength bytes
// that JSON escapes six times over (every byte "<", ">" or "&" becomes
// \\u003c) is 384 KiB in the event, twice that with its old value: under
// 1 MiB. The per-instance bound keeps the stored row, the admin API's
// answers and the config drive small.
const (
	// MaxKeyLength is the longest config key, in bytes.
	MaxKeyLength = 256
	// MaxValueLength is the longest config value, in bytes.
	MaxValueLength = 64 << 10
	// MaxConfigSize is the most an instance's config may hold: the sum of
	// the lengths of its keys and values (volatile keys included).
	MaxConfigSize = 256 << 10
	// MaxConfigKeys is the most keys an instance's config may hold
	// (volatile keys included).
	MaxConfigKeys = 512
	// MaxKeysPerChange is the most keys one Create or UpdateConfig may
	// set and unset together: each changed user.* key of a running
	// instance is one event pushed to its agent.
	MaxKeysPerChange = 256
)

// checkKeySyntax checks a config key against LXD's key grammar: printable
// ASCII letters, digits, ".", "-", "_" and "/", in dot-separated segments
// none of which is empty (so no leading or trailing dot), at most
// MaxKeyLength bytes. The error names the key (quoted, so that control
// bytes and invalid UTF-8 show) and the first offending byte.
func checkKeySyntax(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid configuration key %q: %s: %w", key, why, errdefs.ErrInvalid)
	}
	switch {
	case key == "":
		return fmt.Errorf("invalid configuration key: the key is empty: %w", errdefs.ErrInvalid)
	case len(key) > MaxKeyLength:
		return bad(fmt.Sprintf("longer than %d bytes (%d)", MaxKeyLength, len(key)))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		ok := c == '.' || c == '-' || c == '_' || c == '/' ||
			(c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			if c < 0x20 || c >= 0x7f {
				return bad(fmt.Sprintf("byte 0x%02x at position %d is not a printable ASCII character", c, i))
			}
			return bad(fmt.Sprintf("character %q at position %d is not a letter, digit, '.', '-', '_' or '/'", c, i))
		}
	}
	switch {
	case key[0] == '.':
		return bad("must not start with a dot")
	case key[len(key)-1] == '.' && strings.IndexByte(key, '.') == len(key)-1:
		return fmt.Errorf("configuration key %q has nothing after its prefix: %w", key, errdefs.ErrInvalid)
	case key[len(key)-1] == '.':
		return bad("must not end with a dot")
	}
	for i := 1; i < len(key); i++ {
		if key[i] == '.' && key[i-1] == '.' {
			return bad(fmt.Sprintf("empty segment at position %d", i))
		}
	}
	return nil
}

// checkValue checks that a config value is valid UTF-8 without NUL bytes
// and at most MaxValueLength bytes long.
func checkValue(key, v string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid value for %q: %s: %w", key, why, errdefs.ErrInvalid)
	}
	if len(v) > MaxValueLength {
		return bad(fmt.Sprintf("%d bytes long, at most %d allowed", len(v), MaxValueLength))
	}
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return bad(fmt.Sprintf("not valid UTF-8 (byte 0x%02x at position %d)", v[i], i))
		case r == 0:
			return bad(fmt.Sprintf("contains a NUL byte at position %d", i))
		}
		i += size
	}
	return nil
}

// checkChangeSize checks that one request sets and unsets at most
// MaxKeysPerChange keys.
func checkChangeSize(n int) error {
	if n > MaxKeysPerChange {
		return fmt.Errorf("too many configuration keys in one request (%d, at most %d): %w", n, MaxKeysPerChange, errdefs.ErrInvalid)
	}
	return nil
}

// checkConfigBounds checks that a whole config holds at most MaxConfigKeys
// keys and MaxConfigSize bytes of keys and values; the error names the
// largest key, the likeliest culprit.
func checkConfigBounds(cfg map[string]string) error {
	if len(cfg) > MaxConfigKeys {
		return fmt.Errorf("too many configuration keys (%d, at most %d per instance): %w", len(cfg), MaxConfigKeys, errdefs.ErrInvalid)
	}
	total, largest := 0, ""
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		total += len(k) + len(cfg[k])
		if largest == "" || len(cfg[k]) > len(cfg[largest]) {
			largest = k
		}
	}
	if total > MaxConfigSize {
		return fmt.Errorf("configuration too large (%d bytes of keys and values, at most %d per instance; the largest value is %q, %d bytes): %w",
			total, MaxConfigSize, largest, len(cfg[largest]), errdefs.ErrInvalid)
	}
	return nil
}
