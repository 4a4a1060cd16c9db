package deptest

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root returns the repository's root: the directory of the daemon's go.mod.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// goIn runs the go command with args in dir (a module's directory) and
// returns its output's lines.
func goIn(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// standard reports whether path is a standard library package: its first
// element has no dot, as Go reserves dotless first elements for it.
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// TestAPIModuleStandsAlone checks that api/ is a module that requires
// nothing: its packages, tests included, link the standard library and
// themselves only. An import of the daemon's module (errdefs, core, ...)
// from api/ does not compile, and this test fails if someone makes it
// compile by adding a require to api/go.mod.
func TestAPIModuleStandsAlone(t *testing.T) {
	dir := filepath.Join(root(t), "api")
	if mods := goIn(t, dir, "list", "-m", "all"); !slices.Equal(mods, []string{mod + "/api"}) {
		t.Errorf("api/go.mod's build list is %q, want only %s: the wire types' module requires nothing, so a client links none of the server", mods, mod+"/api")
	}
	// One line per package: "std?|module|import path" (a test variant's
	// path has a space in it).
	for _, p := range goIn(t, dir, "list", "-deps", "-test", "-f", "{{.Standard}}|{{with .Module}}{{.Path}}{{end}}|{{.ImportPath}}", "./...") {
		std, rest, _ := strings.Cut(p, "|")
		module, path, _ := strings.Cut(rest, "|")
		if std != "true" && module != mod+"/api" {
			t.Errorf("api/ links %s (module %q): the wire types import only the standard library", path, module)
		}
	}
}
