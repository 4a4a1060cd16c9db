package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestDocsMatchSchemas fails when a backend's key table in the docs is not
// what its schema generates: a key added, removed or reworded in the code
// and not in the docs, or a table edited by hand.
func TestDocsMatchSchemas(t *testing.T) {
	for _, tb := range tables {
		t.Run(tb.doc, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(tb.doc)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := replace(string(data), tb.name, render(tb.schema))
			if err != nil {
				t.Fatalf("%s: %v", tb.doc, err)
			}
			if want != string(data) {
				t.Fatalf("%s's key table is not the one %s's ConfigSchema generates: run go run ./internal/genkeys (make generate) and commit", tb.doc, tb.name)
			}
			for _, k := range tb.schema {
				if !strings.Contains(string(data), "| `"+k.Name+"` |") {
					t.Errorf("%s has no row for %s", tb.doc, k.Name)
				}
			}
		})
	}
}

// TestReplaceCatchesDrift feeds the check pages that drifted from a schema
// (a row missing, a row added by hand, a default changed) and pages whose
// markers are broken: each must differ from the generated page or fail.
func TestReplaceCatchesDrift(t *testing.T) {
	schema := []sdk.ConfigKey{
		{Name: "x.a", Type: sdk.ConfigInt, Default: "`1`", Doc: "first | with a pipe"},
		{Name: "x.b", Type: sdk.ConfigString, Doc: "second"},
	}
	begin, end := markers("x")
	page := func(table string) string {
		return "# X\n\nbefore\n\n" + begin + "\n" + table + end + "\n\nafter\n"
	}
	good := page(render(schema))
	if got, err := replace(good, "x", render(schema)); err != nil || got != good {
		t.Fatalf("an up-to-date page changed (%v):\n%s", err, got)
	}
	if !strings.Contains(good, "| `x.a` | int | `1` | first \\| with a pipe |\n") || !strings.Contains(good, "| `x.b` | string |  | second |\n") {
		t.Fatalf("rendered rows are wrong:\n%s", good)
	}
	for name, drifted := range map[string]string{
		"row missing":    page(render(schema[:1])),
		"row by hand":    page(render(schema) + "| `x.c` | int | | third |\n"),
		"default edited": strings.Replace(good, "`1`", "`2`", 1),
	} {
		got, err := replace(drifted, "x", render(schema))
		if err != nil || got != good {
			t.Errorf("%s: regenerating gave (%v):\n%s\nwant:\n%s", name, err, got, good)
		}
		if got == drifted {
			t.Errorf("%s: the drifted page passes as up to date", name)
		}
	}
	for name, broken := range map[string]string{
		"no markers":    "# X\n",
		"no end":        "# X\n" + begin + "\n",
		"twice":         good + good,
		"end before":    "# X\n" + end + "\n" + begin + "\n",
		"other backend": strings.ReplaceAll(good, "keys of x", "keys of y"),
	} {
		if _, err := replace(broken, "x", render(schema)); err == nil {
			t.Errorf("%s: replace accepted a page without proper markers", name)
		}
	}
}
