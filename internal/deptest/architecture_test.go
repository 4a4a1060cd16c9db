package deptest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ruleTableBlock is the generated block of docs/architecture.md that
// shows the rules.
var ruleTableBlock = regexp.MustCompile(`(?s)(<!-- rules: [^>]*-->\n).*?(<!-- /rules -->)`)

// rel returns path (or pattern) as the docs write it: relative to the
// repository, in backquotes.
func rel(path string) string {
	return "`" + strings.TrimPrefix(path, mod+"/") + "`"
}

// cell escapes s for a markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// ruleTable renders rules as the markdown table docs/architecture.md
// shows: one row per rule, in the rules' order.
func ruleTable(rules []rule) string {
	var b strings.Builder
	b.WriteString("| rule | packages | must not import | why |\n| --- | --- | --- | --- |\n")
	for _, r := range rules {
		pkgs := make([]string, 0, len(r.pkgs))
		for _, p := range r.pkgs {
			pkgs = append(pkgs, rel(p))
		}
		what := strings.Join(pkgs, ", ")
		if len(r.skip) > 0 {
			var skip []string
			for _, s := range r.skip {
				skip = append(skip, s.label)
			}
			what += " but " + strings.Join(skip, ", ")
		}
		var forbid []string
		for _, f := range r.forbid {
			forbid = append(forbid, f.label)
		}
		not := strings.Join(forbid, ", ")
		if r.exceptLabel != "" {
			not += "; allowed: " + r.exceptLabel
		} else if len(r.except) > 0 {
			var ex []string
			for _, e := range r.except {
				ex = append(ex, rel(e))
			}
			not += "; allowed: " + strings.Join(ex, ", ")
		}
		if r.direct {
			not = "directly: " + not
		}
		b.WriteString("| " + cell(r.name) + " | " + cell(what) + " | " + cell(not) + " | " + cell(r.reason) + " |\n")
	}
	return b.String()
}

// TestArchitectureRuleTable checks that docs/architecture.md's rule table
// is the rules' own (-update rewrites it): the docs cannot drift from
// what the test enforces.
func TestArchitectureRuleTable(t *testing.T) {
	const path = "docs/architecture.md"
	doc, err := os.ReadFile(filepath.Join(root(t), path))
	if err != nil {
		t.Fatal(err)
	}
	if !ruleTableBlock.Match(doc) {
		t.Fatalf("%s has no <!-- rules: ... --> ... <!-- /rules --> block", path)
	}
	want := string(ruleTableBlock.ReplaceAllFunc(doc, func(block []byte) []byte {
		m := ruleTableBlock.FindSubmatch(block)
		return slices.Concat(m[1], []byte(ruleTable(rules)), m[2])
	}))
	checkGenerated(t, path, want, "the rule table is generated from internal/deptest's rules")
}

// TestRuleTableShowsEveryRule checks the rendering itself: a rule added
// to the list gets a row with its packages, what it forbids and its
// reason, so the table cannot drop a rule or a reason.
func TestRuleTableShowsEveryRule(t *testing.T) {
	extra := rule{name: "probe", pkgs: []string{mod + "/core/probe/..."}, forbid: slices.Concat(own("db"), []deps{pluginStack}),
		except: []string{mod + "/db/x"}, direct: true, reason: "a reason | with a pipe"}
	table := ruleTable(append(slices.Clone(rules), extra))
	rows := strings.Split(strings.TrimSpace(table), "\n")
	if len(rows) != 2+len(rules)+1 {
		t.Fatalf("table has %d rows for %d rules:\n%s", len(rows)-2, len(rules)+1, table)
	}
	for i, r := range rules {
		if !strings.HasPrefix(rows[2+i], "| "+r.name+" |") || !strings.Contains(rows[2+i], cell(r.reason)) {
			t.Errorf("row %d is %q, want rule %q with its reason", i, rows[2+i], r.name)
		}
	}
	want := "| probe | `core/probe/...` | directly: `db`, go-plugin, gRPC; allowed: `db/x` | a reason \\| with a pipe |"
	if got := rows[len(rows)-1]; got != want {
		t.Errorf("the added rule's row is\n%s\nwant\n%s", got, want)
	}
}
