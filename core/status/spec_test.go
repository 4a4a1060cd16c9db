package status

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// specDoc is the status-code contract, from this package's folder.
const specDoc = "../../docs/spec/status.md"

// specRow matches a row of the spec's status-code table: | 113 | Ready |
var specRow = regexp.MustCompile(`^\| (\d{3}) \| ([A-Za-z ]+?) \|$`)

// TestSpecStatusTable checks that docs/spec/status.md's "Status codes" table
// and this package's names hold the same codes with the same names, so the
// spec cannot drift from the code in either direction (a code added to one
// and not the other, a name's case changed).
func TestSpecStatusTable(t *testing.T) {
	data, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Status codes\n")
	if !ok {
		t.Fatalf("%s has no \"## Status codes\" section", specDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	spec := map[Code]string{}
	for line := range strings.Lines(section) {
		m := specRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if prev, dup := spec[Code(n)]; dup {
			t.Errorf("%s lists %d twice (%q, %q)", specDoc, n, prev, m[2])
		}
		spec[Code(n)] = m[2]
	}
	if len(spec) == 0 {
		t.Fatalf("%s: no rows found in its status-code table", specDoc)
	}
	for _, c := range slices.Sorted(maps.Keys(names)) {
		if got, ok := spec[c]; !ok {
			t.Errorf("code %d (%q) is in core/status but not in %s", c, names[c], specDoc)
		} else if got != names[c] {
			t.Errorf("code %d: %s names it %q, core/status %q", c, specDoc, got, names[c])
		}
	}
	for _, c := range slices.Sorted(maps.Keys(spec)) {
		if _, ok := names[c]; !ok {
			t.Errorf("code %d (%q) is in %s but not in core/status", c, spec[c], specDoc)
		}
	}
}
