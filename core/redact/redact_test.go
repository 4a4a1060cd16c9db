package redact

import (
	"regexp"
	"testing"
)

// TestPaths redacts the paths Go's errors carry (os.PathError, %q-quoted,
// after '=', in a list) and leaves API routes, URLs and plain words alone.
func TestPaths(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"creating storage volume default/v1: truncate /tmp/gle2e-123/storage/default/custom/v1: file too large",
			"creating storage volume default/v1: truncate <path>: file too large"},
		{`open "/var/lib/guestlink/db.sqlite": permission denied`, `open "<path>": permission denied`},
		{"/abs/at/start: boom", "<path>: boom"},
		{"state dir=/srv/gl,plugins=/srv/gl/bin", "state dir=<path>,plugins=<path>"},
		{"(/run/x.sock) and [/a/b]", "(<path>) and [<path>]"},
		{"root /, stop / start", "root /, stop / start"},
		{"forwarding GET /1.0/instances/web1 to m2: 503", "forwarding GET /1.0/instances/web1 to m2: 503"},
		{`Get "http://unix/1.0": EOF`, `Get "http://unix/1.0": EOF`},
		{"volume default/v1 of pool default", "volume default/v1 of pool default"},
		{"no slash at all", "no slash at all"},
	} {
		if got := Paths(tc.in); got != tc.want {
			t.Errorf("Paths(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestMessage checks the id's form and that two ids differ.
func TestMessage(t *testing.T) {
	id := NewRequestID()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) || id == NewRequestID() {
		t.Fatalf("request id %q", id)
	}
	if got, want := Message("open /x/y: denied", id), "open <path>: denied (request "+id+"; the daemon's log has the detail)"; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
}
