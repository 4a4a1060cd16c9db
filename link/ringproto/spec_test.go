package ringproto

import (
	"os"
	"strings"
	"testing"
)

// specDoc is the guest-link contract, from this package's folder.
const specDoc = "../../docs/spec/guest-link.md"

// TestSpecWordsAndPorts checks that docs/spec/guest-link.md names, in its
// ring-buffer and port sections, exactly the words and port names this
// package defines, so the contract and the code use the same bytes.
func TestSpecWordsAndPorts(t *testing.T) {
	data, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	section := func(heading string) string {
		_, s, ok := strings.Cut(string(data), "\n## "+heading)
		if !ok {
			t.Fatalf("%s has no section %q", specDoc, heading)
		}
		s, _, _ = strings.Cut(s, "\n## ")
		return s
	}
	ring := section("1. The ring buffer")
	for _, w := range []Word{Started, Connected, Stopped} {
		if !Known(w) {
			t.Errorf("Known(%q) = false", w)
		}
		if !strings.Contains(ring, "`"+string(w)+"`") {
			t.Errorf("%s's ring-buffer section does not name the word %q", specDoc, w)
		}
	}
	for _, w := range []Word{"READY", "started", "CONNECT"} {
		if Known(w) {
			t.Errorf("Known(%q) = true: the spec has no such word", w)
		}
	}
	ports := section("2. Port names")
	for _, p := range []string{PortCurrent, PortLegacy} {
		if !strings.Contains(ports, "`"+p+"`") {
			t.Errorf("%s's port section does not name the port %q", specDoc, p)
		}
	}
}
