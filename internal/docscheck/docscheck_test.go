package docscheck

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from this package's folder.
const root = "../.."

// TestRepoCitesNothingOutside fails when any file of the repository (code,
// docs, scripts) cites the spec, seeds or notes of the directory around the
// clone instead of the in-repository docs/spec/ pages.
func TestRepoCitesNothingOutside(t *testing.T) {
	found, err := OutsideCitations(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestRepoDocLinksResolve fails when a relative link in README.md or in a
// page under docs/ names a file that does not exist, leaves the repository,
// or names a heading its page does not have.
func TestRepoDocLinksResolve(t *testing.T) {
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/architecture.md", "docs/spec/devlxd.md", "docs/spec/guest-link.md", "docs/spec/status.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("MarkdownFiles left out %s (got %d files)", want, len(files))
		}
	}
	found, err := BrokenLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestCheckersCatchBreaks feeds both checks a tree with one deliberate break
// of each kind, and one line of each kind that must pass, and checks that
// exactly the breaks are reported.
func TestCheckersCatchBreaks(t *testing.T) {
	dir := t.TempDir()
	spec := "shared/" + "spec" // spelled apart so this file does not cite it
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\nSee [the spec](docs/spec/a.md) and [gone](docs/gone.md) and [web](https://example.com/x.md).\n")
	write("docs/spec/a.md", "# A page\n\n## Ring words (`STARTED`)\n\n## Ring words (`STARTED`)\n\n[ok](#ring-words-started-1) [bad anchor](#no-such) [up](../../../outside.md) [folder](../spec/)\n\n```\n[in code](nowhere.md)\n```\n\nNot a link: `[x](nowhere.md)`.\n\n[ref]: ../gone-too.md\n")
	write("core/x.go", "package x\n\n// Code is a status code (../"+spec+"/status.md).\n")
	write("core/y.go", "package y\n\n// The ring buffer lives in plugins/"+spec+"ringbuffer; see docs/spec/status.md.\n")
	write("docs/b.md", "The contract is the "+spec+"/devlxd.md of the work"+"space.\n")
	write("bin/skip.md", "[gone](nowhere.md) "+spec+"/x\n")
	write("core/blob.bin", "\x00"+spec+"/x\n")

	cites, err := OutsideCitations(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range cites {
		got = append(got, f.File)
	}
	if want := []string{"core/x.go", "docs/b.md"}; !slices.Equal(got, want) {
		t.Errorf("OutsideCitations reported %v, want %v (plugins/shared/... and skipped or binary files are not citations)", cites, want)
	}

	files, err := MarkdownFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/b.md", "docs/spec/a.md"}; !slices.Equal(files, want) {
		t.Fatalf("MarkdownFiles = %v, want %v", files, want)
	}
	broken, err := BrokenLinks(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	var what []string
	for _, f := range broken {
		what = append(what, f.String())
	}
	wantSubs := []string{
		`README.md:3: link "docs/gone.md": docs/gone.md does not exist`,
		`docs/spec/a.md:7: link "#no-such": docs/spec/a.md has no heading #no-such`,
		`docs/spec/a.md:7: link "../../../outside.md" leaves the repository`,
		`docs/spec/a.md:15: link "../gone-too.md": docs/gone-too.md does not exist`,
	}
	if !slices.Equal(what, wantSubs) {
		t.Errorf("BrokenLinks reported\n%s\nwant\n%s", strings.Join(what, "\n"), strings.Join(wantSubs, "\n"))
	}
}

// TestSlug checks the anchors against headings of this repository's pages
// whose GitHub anchors other pages link to.
func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Daemon at 10,000 instances", "daemon-at-10000-instances"},
		{"devlxd against the floor (issue 14, latency half)", "devlxd-against-the-floor-issue-14-latency-half"},
		{"`GET /1.0/instances` at 10,000 running guests", "get-10instances-at-10000-running-guests"},
		{"Instance model (db.Instance)", "instance-model-dbinstance"},
		{"Ready → badge, p99 ≤ 200 ms", "ready--badge-p99--200-ms"},
		{"snake_case and UPPER", "snake_case-and-upper"},
	}
	for _, tt := range tests {
		if got := Slug(tt.heading); got != tt.want {
			t.Errorf("Slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

// fleetTarget matches a target of the fleet benchmark, whose name the
// benchmark prints as "TARGET <name> ..." for scripts to compare runs by:
// target("daemon-idle-cpu", idle, "%core", idle <= 5).
var fleetTarget = regexp.MustCompile(`\btarget\("([a-z0-9-]+)",`)

// TestPerformanceNamesEveryTarget fails when a TARGET name that a benchmark
// in the repository prints is missing from docs/performance.md, so the page
// of current results keeps the names scripts rely on. It finds the names in
// every _test.go file, wherever the fleet benchmark lives.
func TestPerformanceNamesEveryTarget(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // name -> file
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && slices.Contains(skipDirs, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fleetTarget.FindAllSubmatch(data, -1) {
			names[string(m[1])] = relSlash(root, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found %d TARGET names in the benchmarks (%v); the fleet benchmark has at least 10: has target() been renamed?", len(names), names)
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("docs/performance.md does not name the TARGET %q that %s prints: add its current figure to the fleet table", name, names[name])
		}
	}
}

// TestArchitectureNamesEveryPackage fails when a folder holding a Go
// package is missing from docs/architecture.md, the map a newcomer reads
// first.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	missing, err := UndocumentedPackages(root, "docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range missing {
		t.Errorf("docs/architecture.md does not name the package folder %s: add it to \"Where each concept lives\"", dir)
	}
}

// TestUndocumentedPackages checks the ways a page may name a folder, and
// that a folder named nowhere (or only inside another word) is reported.
func TestUndocumentedPackages(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{
		"core/auth/auth.go", "core/api/api.go", "core/api/apitest/kit.go", "internal/testenv/env.go",
		"internal/testproc/proc.go", "link/ringproto/ring.go", "core/forgotten/f.go", "core/forgotten/testdata/x.go",
		"core/onlytests/x_test.go", "bin/tool/main.go", "main.go",
	} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page := "| auth | `core/auth` | auth |\n| API | `core/api` (+ `apitest`) | api |\n" +
		"| helpers | `internal/{testenv,testproc}` | |\n| ring | `link/ringproto/` | |\n| not a name | `core/forgottenx`, core/forgotten | |\n"
	if err := os.WriteFile(filepath.Join(dir, "arch.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	missing, err := UndocumentedPackages(dir, "arch.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"core/forgotten"}; !slices.Equal(missing, want) {
		t.Errorf("UndocumentedPackages = %v, want %v (braces, (+ `child`) and a trailing slash name a folder; test-only, testdata, bin/ and the root are not packages to name)", missing, want)
	}
}
