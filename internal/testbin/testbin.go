// Package testbin gives tests the module's binaries (the daemon, the CLI,
// the agent, plugins), each built at most once per content: a binary is
// built into a cache directory under a key made of its sources, and every
// later test binary, in the same go test run or a later one, reuses it
// until a source changes.
//
// The key hashes the Go version, GOOS, GOARCH, GOFLAGS, go.mod, go.sum and
// every Go and embedded file of the packages the binary is built from that
// belong to this module (or to a module replaced by a local directory);
// other modules are fixed by go.sum. Builds are like make build's: static
// (CGO_ENABLED=0) with -trimpath. The cache keeps the newest few builds of
// each binary.
//
// With GUESTLINK_BIN set to a directory laid out like make build's bin/
// (guestlinkd, guestlink, guestlink-agent, plugins/<name>), Path returns the
// binaries found there instead of building them.
package testbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Env names a directory of prebuilt binaries laid out like make build's
// bin/; when it is set, Path takes the binaries it holds from there.
const Env = "GUESTLINK_BIN"

// Module is the import path of the module whose binaries are built.
const Module = "github.com/guestlink/guestlink"

// Import paths of the binaries most tests need.
const (
	Daemon = Module + "/cmd/guestlinkd"
	CLI    = Module + "/cmd/guestlink"
	Agent  = Module + "/cmd/guestlink-agent"
	Sim    = Module + "/plugins/sim"
	Fleet  = Module + "/plugins/fleet"
)

// keep is how many builds of each binary the cache keeps; prune spares
// younger builds than minAge whatever their number, so that a build
// another test binary just chose is not removed under it.
const (
	keep   = 4
	minAge = time.Hour
)

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

// build is one binary's build in this process.
type build struct {
	once sync.Once
	path string
	err  error
}

// Path returns the path of an up-to-date binary of the main package pkg (an
// import path such as Daemon or Module+"/plugins/qemu"), building it on
// first use in this process unless the cache or GUESTLINK_BIN has it. The
// file is shared: callers must not change it (Install copies it where they
// need it).
func Path(pkg string) (string, error) {
	if p := fromEnv(pkg); p != "" {
		return p, nil
	}
	mu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = buildCached(pkg) })
	return b.path, b.err
}

// Install copies the binary of pkg to dst, creating dst's directory; the
// binary then sees dst as its own path, as under make build's layout. A
// copy, not a link: a test may change its file's mode or owner.
func Install(pkg, dst string) error {
	src, err := Path(pkg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("installing %s: %w", pkg, err)
	}
	if err := copyFile(src, dst); err != nil {
		return fmt.Errorf("installing %s at %s: %w", pkg, dst, err)
	}
	return nil
}

// fromEnv returns the binary of pkg under GUESTLINK_BIN ("" when it is
// unset or holds no such file): cmd/NAME is NAME, plugins/NAME is
// plugins/NAME.
func fromEnv(pkg string) string {
	dir := os.Getenv(Env)
	rel, ok := strings.CutPrefix(pkg, Module+"/")
	if dir == "" || !ok {
		return ""
	}
	var p string
	if name, ok := strings.CutPrefix(rel, "cmd/"); ok && !strings.Contains(name, "/") {
		p = filepath.Join(dir, name)
	} else if name, ok := strings.CutPrefix(rel, "plugins/"); ok && !strings.Contains(name, "/") {
		p = filepath.Join(dir, "plugins", name)
	} else {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return abs
}

// buildCached returns the cached build of pkg for its current sources,
// building it first when the cache has none.
func buildCached(pkg string) (string, error) {
	key, err := contentKey(pkg)
	if err != nil {
		return "", fmt.Errorf("building %s for tests: %w", pkg, err)
	}
	dir, err := cacheDir()
	if err != nil {
		return "", fmt.Errorf("building %s for tests: %w", pkg, err)
	}
	name := path.Base(pkg)
	out := filepath.Join(dir, name+"-"+key)
	if _, err := os.Stat(out); err == nil {
		now := time.Now()
		_ = os.Chtimes(out, now, now) // newest: prune keeps it
		return out, nil
	}
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("building %s for tests: %w", pkg, err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // after the rename, nothing is left to remove
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp.Name(), pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("building %s for tests: %w", pkg, err)
	}
	prune(dir, name, out)
	return out, nil
}

// contentKey hashes what the binary of pkg is built from (see the package
// doc).
func contentKey(pkg string) (string, error) {
	const tmpl = `{{with .Module}}{{if or .Main (and .Replace (not .Replace.Version))}}{{$.Dir}}` +
		`{{range $.GoFiles}}|{{.}}{{end}}{{range $.EmbedFiles}}|{{.}}{{end}}{{"\n"}}{{end}}{{end}}`
	cmd := exec.Command("go", "list", "-deps", "-f", tmpl, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	list, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s GOFLAGS=%s\n%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, os.Getenv("GOFLAGS"), pkg)
	files := []string{}
	if mod := strings.TrimSpace(string(gomod)); mod != "" && mod != os.DevNull {
		files = append(files, mod, strings.TrimSuffix(mod, ".mod")+".sum")
	}
	for line := range strings.Lines(string(list)) {
		parts := strings.Split(strings.TrimSpace(line), "|")
		for _, f := range parts[1:] {
			files = append(files, filepath.Join(parts[0], f))
		}
	}
	for _, f := range files {
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// hashFile adds f's name and contents to h; a missing go.sum hashes as
// empty.
func hashFile(h io.Writer, f string) error {
	fmt.Fprintf(h, "\x00%s\x00", f)
	r, err := os.Open(f)
	if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(f, ".sum") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hashing sources: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("hashing %s: %w", f, err)
	}
	return nil
}

// cacheDir returns (creating it) the directory the builds are kept in:
// guestlink-testbin under the user's cache directory, or under the
// temporary directory when there is none.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "guestlink-testbin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the test binary cache: %w", err)
	}
	return dir, nil
}

// prune removes the builds of name in dir beyond the newest keep, except
// just, and any younger than minAge.
func prune(dir, name, just string) {
	matches, err := filepath.Glob(filepath.Join(dir, name+"-*"))
	if err != nil {
		return
	}
	type entry struct {
		path string
		mod  time.Time
	}
	var es []entry
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && len(filepath.Base(m)) == len(name)+1+32 {
			es = append(es, entry{m, fi.ModTime()})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return b.mod.Compare(a.mod) })
	for i, e := range es {
		if i >= keep && e.path != just && time.Since(e.mod) > minAge {
			os.Remove(e.path)
		}
	}
}

// copyFile copies src to dst with src's mode.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
