// Package guestpath checks the paths of a guest's file system that cross the
// link (the /1.0/files routes of the admin API and of the agent): absolute,
// without NUL bytes and without ".." elements. The daemon checks them
// before it reaches the agent, the agent again before it touches a file.
package guestpath

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrInvalid is wrapped by Clean's errors.
var ErrInvalid = errors.New("invalid path")

// Clean checks a guest path and returns it relative to the guest's root
// ("." for "/"): it must be absolute, hold no NUL byte and no ".." element
// (a path that climbs is refused rather than cleaned).
func Clean(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty, an absolute path in the guest is required", ErrInvalid)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%w %q: holds a NUL byte", ErrInvalid, p)
	case !strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%w %q: not absolute", ErrInvalid, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w %q: holds a \"..\" element", ErrInvalid, p)
		}
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}
