package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// specDoc is the lifecycle-event contract, from this package's folder.
const specDoc = "../../docs/spec/status.md"

// specAction matches an action named in the spec: `instance-ready`.
var specAction = regexp.MustCompile("`(instance-[a-z-]+)`")

// TestSpecLifecycleActions checks that the "Lifecycle events" section of
// docs/spec/status.md names exactly the lifecycle actions this package
// defines (every string constant "instance-..." of its non-test files, read
// with go/parser so that a new constant cannot be forgotten here).
func TestSpecLifecycleActions(t *testing.T) {
	data, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Lifecycle events\n")
	if !ok {
		t.Fatalf("%s has no \"## Lifecycle events\" section", specDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	spec := map[string]bool{}
	for _, m := range specAction.FindAllStringSubmatch(section, -1) {
		spec[m[1]] = true
	}

	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "instance-") {
						code[s] = true
					}
				}
			}
			return true
		})
	}
	if len(code) == 0 {
		t.Fatal("found no instance-... constants in core/events")
	}
	for _, a := range slices.Sorted(maps.Keys(code)) {
		if !spec[a] {
			t.Errorf("core/events defines %q, which %s does not name", a, specDoc)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(spec)) {
		if !code[a] {
			t.Errorf("%s names %q, which core/events does not define", specDoc, a)
		}
	}
}
