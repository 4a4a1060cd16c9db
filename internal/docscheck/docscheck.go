// Package docscheck finds what makes the repository's documentation
// untrustworthy to a reader who has only a clone of it: citations of files
// outside the repository (the protocol notes and design seeds that sat
// beside it while it was written) and relative markdown links whose file or
// heading does not exist.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Finding is one problem at one line of one file.
type Finding struct {
	// File is the path relative to the root that was checked, with slashes.
	File string
	// Line is 1-based.
	Line int
	// What says what is wrong, naming the offending text.
	What string
}

// String formats f as "file:line: what".
func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.What) }

// skipDirs are directories of build output, dependencies and run state,
// none of them tracked (.gitignore), and git's own.
var skipDirs = []string{".git", "bin", ".run", "node_modules", "test-results"}

// outside matches a citation of a file in the directory around the
// repository rather than in it: its shared folder's spec, seeds, hooks and
// notes, or any text calling them "of the work space". plugins/shared/... is
// the repository's own folder and is not matched (the character before
// "shared/" must not be part of a path). The pattern is spelled so that this
// file does not match it.
var outside = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(?:\.\./)*` + `shared/(?:spec|seeds|hooks|style\.md|ecosystem\.md|qemu-notes\.md)\b` +
	`|of the work` + `space|work` + `space's`)

// OutsideCitations walks every text file under root (binary files, those
// holding a NUL byte, and skipDirs are left out) and reports each line that
// cites a file outside the repository.
func OutsideCitations(root string) ([]Finding, error) {
	var out []Finding
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && slices.Contains(skipDirs, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			return nil
		}
		rel := relSlash(root, path)
		for i, line := range strings.Split(string(data), "\n") {
			if m := outside.FindString(line); m != "" {
				out = append(out, Finding{rel, i + 1, fmt.Sprintf("cites %q, outside the repository: cite the file in docs/spec/ instead", strings.TrimLeft(m, " `'\"("))})
			}
		}
		return nil
	})
	return out, err
}

// MarkdownFiles returns README.md (when present) and every .md file under
// root/docs, relative to root with slashes: the pages whose links
// BrokenLinks checks.
func MarkdownFiles(root string) ([]string, error) {
	var files []string
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		files = append(files, "README.md")
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, relSlash(root, path))
		}
		return nil
	})
	return files, err
}

// inlineLink matches [text](target) and ![alt](target); the target ends at
// the first space (an optional "title" follows) or closing parenthesis.
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// refDef matches a reference definition: [label]: target.
var refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)

// codeSpan matches inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// BrokenLinks checks the relative links of the given markdown files (paths
// relative to root): the file or folder a link names must exist, and an
// anchor (#...) must be a heading of the target page, as GitHub names
// headings. Links with a scheme (https:, mailto:) are not followed; links
// inside code are not links.
func BrokenLinks(root string, files []string) ([]Finding, error) {
	anchors := map[string]map[string]bool{} // page -> its heading slugs
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", page, err)
		}
		a := headingSlugs(string(data))
		anchors[page] = a
		return a, nil
	}
	var out []Finding
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		for _, l := range links(string(data)) {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			page := file
			if path != "" {
				page = filepath.ToSlash(filepath.Join(filepath.Dir(file), filepath.FromSlash(path)))
				if strings.HasPrefix(page, "../") || filepath.IsAbs(path) {
					out = append(out, Finding{file, l.line, fmt.Sprintf("link %q leaves the repository", target)})
					continue
				}
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(page)))
				if err != nil {
					out = append(out, Finding{file, l.line, fmt.Sprintf("link %q: %s does not exist", target, page)})
					continue
				}
				if st.IsDir() || !strings.HasSuffix(page, ".md") {
					if anchor != "" {
						out = append(out, Finding{file, l.line, fmt.Sprintf("link %q: an anchor on %s, which is not a markdown page", target, page)})
					}
					continue
				}
			}
			if anchor == "" {
				continue
			}
			a, err := anchorsOf(page)
			if err != nil {
				return nil, err
			}
			if !a[anchor] {
				out = append(out, Finding{file, l.line, fmt.Sprintf("link %q: %s has no heading #%s", target, page, anchor)})
			}
		}
	}
	return out, nil
}

type link struct {
	line   int
	target string
}

// links returns the link targets of a markdown page, outside fenced code
// blocks and code spans.
func links(text string) []link {
	var out []link
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			out = append(out, link{n, m[1]})
		}
	}
	return out
}

// headingSlugs returns the anchors GitHub gives a page's ATX headings:
// lowercased, markup and punctuation dropped, spaces turned into hyphens,
// a repeated slug numbered -1, -2, ...
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		level := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(trimmed[level:], " ") {
			continue
		}
		s := Slug(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(trimmed[level:]), "#")))
		if k := seen[s]; k > 0 {
			slugs[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// Slug returns the anchor GitHub derives from a heading's text: lowercase,
// letters, digits, hyphens and underscores kept, spaces made hyphens,
// everything else (markup, punctuation, symbols) dropped.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func relSlash(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	return filepath.ToSlash(rel)
}

// UndocumentedPackages returns the folders under root holding a Go package
// (a non-test .go file; testdata, skipDirs and the docs' own tree left out)
// that the markdown page (a path relative to root) does not name. A folder
// is named by a code span holding its path: `core/auth`, or one of the
// paths a span's braces expand to (`internal/{testenv,testproc}`), or a
// child given after its parent's span as (+ `name`).
func UndocumentedPackages(root, page string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", page, err)
	}
	named := namedPaths(string(data))
	var missing []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (slices.Contains(skipDirs, d.Name()) || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		dir := relSlash(root, filepath.Dir(path))
		if dir != "." && !named[dir] && !slices.Contains(missing, dir) {
			missing = append(missing, dir)
		}
		return nil
	})
	return missing, err
}

// childSpan matches a parent's code span followed, in the same table cell,
// by "+ `child`": `core/api` (+ `apitest`).
var childSpan = regexp.MustCompile("`([^`|]+)`[^|`]*\\(\\+ `([^`|]+)`")

// namedPaths returns every path the page's code spans name, braces
// expanded, trailing slashes dropped.
func namedPaths(text string) map[string]bool {
	named := map[string]bool{}
	add := func(p string) {
		for _, e := range expandBraces(strings.TrimSpace(p)) {
			named[strings.TrimSuffix(e, "/")] = true
		}
	}
	for _, span := range codeSpan.FindAllString(text, -1) {
		add(strings.Trim(span, "`"))
	}
	for _, m := range childSpan.FindAllStringSubmatch(text, -1) {
		for _, parent := range expandBraces(m[1]) {
			add(strings.TrimSuffix(parent, "/") + "/" + m[2])
		}
	}
	return named
}

// expandBraces expands the first {a,b,...} group of p, recursively:
// "x/{a,b}" is "x/a" and "x/b".
func expandBraces(p string) []string {
	open := strings.IndexByte(p, '{')
	end := strings.IndexByte(p, '}')
	if open < 0 || end < open {
		return []string{p}
	}
	var out []string
	for alt := range strings.SplitSeq(p[open+1:end], ",") {
		out = append(out, expandBraces(p[:open]+strings.TrimSpace(alt)+p[end+1:])...)
	}
	return out
}
