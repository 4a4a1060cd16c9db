package deptest

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// update rewrites the generated files this package checks instead of
// comparing them: the allow-lists under testdata/depaware/, the agent's
// module list in docs/guest-link.md and the rule table in
// docs/architecture.md.
var update = flag.Bool("update", false, "rewrite testdata/depaware/*.txt and the docs' generated blocks")

// howToUpdate is what a failure says to do when a change is intended.
const howToUpdate = "if the change is intended, run `go test ./internal/deptest -update` (or `make depaware`), review the diff and commit it"

// binary is one of the programs whose whole dependency list is checked in,
// as Tailscale's depaware.txt: a new module or package in it shows in the
// diff of a review, so these stay small by decision, not by luck.
type binary struct {
	name string // file name under testdata/depaware, without ".txt"
	dir  string // module directory the packages are listed in, relative to the root
	pkgs []string
	why  string
}

// binaries are the programs that must stay small.
var binaries = []binary{
	{"guestlink", ".", []string{"./cmd/guestlink"},
		"the CLI links wire types and a client, never the store, the plugin host or an HTTP server"},
	{"guestlink-agent", ".", []string{"./cmd/guestlink-agent"},
		"the agent runs in every guest: a small static binary whose modules docs/guest-link.md names"},
	{"sdk", "plugins/sdk", []string{"./..."},
		"plugin authors import the SDK: every module it links is one they link too"},
	{"api", "api", []string{"./..."},
		"clients import the wire types: they require nothing but the standard library"},
}

// listEnv fixes what changes a dependency list besides the code, so the
// lists are the same on every machine: the agent and the CLI ship as
// static linux/amd64 binaries (Makefile: CGO_ENABLED=0).
var listEnv = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS="}

// ownPrefix marks this repository's modules: of them the list names every
// package, of the others only the module.
const ownPrefix = mod

// depaware returns b's allow-list: every module b links outside the
// standard library, and under each of this repository's modules the
// packages b links. overlay, if not empty, is a go list -overlay file
// (the deliberate breaks use it to add a file without touching the tree).
func depaware(t *testing.T, b binary, overlay string) string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{with .Module}}{{.Path}}{{end}} {{.ImportPath}}{{end}}"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, b.pkgs...)...)
	cmd.Dir = filepath.Join(root(t), b.dir)
	cmd.Env = append(os.Environ(), listEnv...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s in %s: %v\n%s", strings.Join(b.pkgs, " "), b.dir, err, stderr)
	}
	pkgsOf := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		module, pkg, ok := strings.Cut(line, " ")
		if !ok || module == "" {
			t.Fatalf("go list -deps: package %q has no module", line)
		}
		if module == ownPrefix || strings.HasPrefix(module, ownPrefix+"/") {
			pkgsOf[module] = append(pkgsOf[module], pkg)
		} else if _, seen := pkgsOf[module]; !seen {
			pkgsOf[module] = nil
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# %s links these modules and, of this repository's modules, these packages: %s.\n", b.name, b.why)
	fmt.Fprintf(&s, "# Generated from `%s go list -deps %s` (in %s) by internal/deptest; `go test ./internal/deptest -update` rewrites it.\n",
		strings.Join(listEnv[:3], " "), strings.Join(b.pkgs, " "), b.dir)
	for _, m := range slices.Sorted(maps.Keys(pkgsOf)) {
		s.WriteString(m + "\n")
		pkgs := slices.Clone(pkgsOf[m])
		slices.Sort(pkgs)
		for _, p := range slices.Compact(pkgs) {
			s.WriteString("\t" + p + "\n")
		}
	}
	return s.String()
}

// lineDiff returns the lines only in want ("-") and only in got ("+").
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var d strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			d.WriteString("-" + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			d.WriteString("+" + l + "\n")
		}
	}
	return d.String()
}

// checkGenerated compares the file at path (relative to the root) with
// want, or rewrites it under -update.
func checkGenerated(t *testing.T, path, want, why string) {
	t.Helper()
	full := filepath.Join(root(t), path)
	if *update {
		if err := os.WriteFile(full, []byte(want), 0o644); err != nil {
			t.Fatalf("updating %s: %v", path, err)
		}
		return
	}
	got, err := os.ReadFile(full)
	if err != nil {
		t.Fatalf("reading %s: %v (%s)", path, err, howToUpdate)
	}
	if string(got) != want {
		t.Errorf("%s is not what the code gives (%s); lines removed (-) and added (+):\n%s%s", path, why, lineDiff(string(got), want), howToUpdate)
	}
}

// TestDepaware regenerates each small binary's allow-list and diffs it
// with the checked-in one: a module or package that appears (or goes) in
// the CLI, the agent, the SDK or the wire types fails here until the list
// is updated in the same commit.
func TestDepaware(t *testing.T) {
	for _, b := range binaries {
		t.Run(b.name, func(t *testing.T) {
			checkGenerated(t, filepath.Join("internal/deptest/testdata/depaware", b.name+".txt"), depaware(t, b, ""), b.why)
		})
	}
}

// modules returns the modules (not packages) an allow-list names.
func modules(list string) []string {
	var mods []string
	for _, l := range strings.Split(list, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "\t") {
			mods = append(mods, l)
		}
	}
	return mods
}

// agentModules returns the modules outside this repository that the agent
// links (with overlay, see depaware).
func agentModules(t *testing.T, overlay string) []string {
	t.Helper()
	i := slices.IndexFunc(binaries, func(b binary) bool { return b.name == "guestlink-agent" })
	var third []string
	for _, m := range modules(depaware(t, binaries[i], overlay)) {
		if m != ownPrefix && !strings.HasPrefix(m, ownPrefix+"/") {
			third = append(third, m)
		}
	}
	return third
}

// agentModulesBlock is the generated block of docs/guest-link.md that
// names the modules the agent links.
var agentModulesBlock = regexp.MustCompile(`(?s)(<!-- agent-modules: [^>]*-->\n).*?(<!-- /agent-modules -->)`)

// TestAgentModulesDocumented checks the promise docs/guest-link.md makes:
// the agent links the standard library, this repository's neutral
// packages and exactly the modules the page names. A ninth module fails
// here (and in TestDepaware).
func TestAgentModulesDocumented(t *testing.T) {
	third := agentModules(t, "")
	var list strings.Builder
	for _, m := range third {
		list.WriteString("- `" + m + "`\n")
	}
	const path = "docs/guest-link.md"
	doc, err := os.ReadFile(filepath.Join(root(t), path))
	if err != nil {
		t.Fatal(err)
	}
	if !agentModulesBlock.Match(doc) {
		t.Fatalf("%s has no <!-- agent-modules: ... --> ... <!-- /agent-modules --> block", path)
	}
	want := string(agentModulesBlock.ReplaceAllFunc(doc, func(block []byte) []byte {
		m := agentModulesBlock.FindSubmatch(block)
		return slices.Concat(m[1], []byte(list.String()), m[2])
	}))
	checkGenerated(t, path, want, fmt.Sprintf("the agent links %d modules besides this repository's", len(third)))
}

// documentedAgentModules returns the modules docs/guest-link.md's
// generated block names.
func documentedAgentModules(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root(t), "docs/guest-link.md"))
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, l := range strings.Split(string(agentModulesBlock.Find(doc)), "\n") {
		if m, ok := strings.CutPrefix(l, "- `"); ok {
			mods = append(mods, strings.TrimSuffix(m, "`"))
		}
	}
	return mods
}

// TestDepawareCatchesANinthModule is the deliberate break of the agent's
// allow-list: a file that imports github.com/google/uuid (a module the
// daemon requires, so it resolves) is laid over cmd/guestlink-agent with
// go list -overlay, the tree untouched. The list must gain the module and
// the documented list must no longer match.
func TestDepawareCatchesANinthModule(t *testing.T) {
	dir := t.TempDir()
	extra := filepath.Join(dir, "ninth.go")
	if err := os.WriteFile(extra, []byte("package main\n\nimport _ \"github.com/google/uuid\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	target := filepath.Join(root(t), "cmd/guestlink-agent/ninth.go")
	if err := os.WriteFile(overlay, fmt.Appendf(nil, `{"Replace":{%q:%q}}`, target, extra), 0o644); err != nil {
		t.Fatal(err)
	}
	documented := documentedAgentModules(t)
	if len(documented) == 0 {
		t.Fatal("docs/guest-link.md names no agent module")
	}
	if got := agentModules(t, ""); !slices.Equal(got, documented) {
		t.Fatalf("without the break the agent links %q, the page names %q", got, documented)
	}
	got := agentModules(t, overlay)
	if !slices.Contains(got, "github.com/google/uuid") || slices.Equal(got, documented) {
		t.Errorf("with an import of github.com/google/uuid laid over the agent, its modules are %q: the break went unseen (documented %q)", got, documented)
	}
}
