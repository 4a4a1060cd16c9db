package events

import "strings"

// Describe says who the requestor is in one short line, for timelines and
// logs: "unix root (uid 0)", "tls alice 0123456789abcdef" (the first 16
// digits of the certificate's fingerprint), "bearer/ci", "session/1a2b3c4d";
// "" when nothing is known.
func (r Requestor) Describe() string {
	switch {
	case r.Protocol == "unix" && r.UID != "":
		return "unix " + r.Username + " (uid " + r.UID + ")"
	case r.Protocol == "tls":
		fp := r.Fingerprint
		if len(fp) > 16 {
			fp = fp[:16]
		}
		return strings.TrimSpace("tls " + r.Username + " " + fp)
	case r.Username != "" && strings.Contains(r.Username, "/"):
		return r.Username
	case r.Username != "":
		return strings.TrimSpace(r.Protocol + " " + r.Username)
	}
	return r.Protocol
}

// maxCause is the length of the timeline's cause column.
const maxCause = 64

// APICause is the timeline cause of a change made through the admin API or
// the dashboard: "api: " (or "dashboard: ") and Describe, cut to the 64
// characters the timeline keeps ("api" alone when the requestor is unknown).
func (r Requestor) APICause() string {
	prefix := "api"
	if r.Protocol == "dashboard" {
		prefix = "dashboard"
	}
	d := r.Describe()
	if d == "" {
		return prefix
	}
	c := prefix + ": " + d
	if len(c) > maxCause {
		c = strings.ToValidUTF8(c[:maxCause], "")
	}
	return c
}
