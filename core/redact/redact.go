// Package redact keeps host details out of what the daemon's HTTP servers
// answer with a 5xx status: the full error, paths and all, goes to the
// daemon's log under a request id, and the client gets the message without
// host paths and the id to find it by.
package redact

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
)

// pathRE is an absolute file path in a message: a "/" at the start or
// after a space, quote, bracket, '=' or ',', and at least one more
// character up to the next space, quote, bracket, ',', ';' or ':' (an
// error's "open /x/y: ..." ends the path at the colon). A URL's "//" after
// a scheme's colon is not a path, nor is a "/" standing alone ("a / b").
var pathRE = regexp.MustCompile(`(^|[\s"'({\[<=,])/[^\s"'(){}\[\]<>,;:]+`)

// Placeholder stands for a removed host path.
const Placeholder = "<path>"

// Paths returns msg with every absolute file path replaced by Placeholder.
// The admin API's own routes ("/1.0/...") are not host paths and stay.
func Paths(msg string) string {
	if !strings.Contains(msg, "/") {
		return msg
	}
	return pathRE.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.IndexByte(m, '/')
		p := m[i:]
		if p == "/1.0" || strings.HasPrefix(p, "/1.0/") {
			return m
		}
		return m[:i] + Placeholder
	})
}

// NewRequestID returns a new request id: 16 hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Message is what a client gets for a server error logged under id: msg
// without host paths, and where the detail is.
func Message(msg, id string) string {
	return Paths(msg) + " (request " + id + "; the daemon's log has the detail)"
}
