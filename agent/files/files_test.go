package files_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/agent/files"
)

// TestClean tries absolute, relative, NUL and ".." paths.
func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "/", want: "."},
		{in: "/etc/hosts", want: "etc/hosts"},
		{in: "//etc///hosts/", want: "etc/hosts"},
		{in: "/./etc/.", want: "etc"},
		{in: "", bad: true},
		{in: "etc/hosts", bad: true},
		{in: "./etc", bad: true},
		{in: "/etc/../../host", bad: true},
		{in: "/a/../b", bad: true},
		{in: "/..", bad: true},
		{in: "/etc/ho\x00sts", bad: true},
	} {
		got, err := files.Clean(tc.in)
		if tc.bad {
			if !errors.Is(err, files.ErrBadPath) {
				t.Errorf("Clean(%q) = %q, %v; want ErrBadPath", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// newGuest makes a guest root beside a file outside it ("secret"), with
// symlinks pointing out of the root (absolute and relative) and one inside.
func newGuest(t *testing.T) (*files.FS, string) {
	t.Helper()
	top := t.TempDir()
	root := filepath.Join(top, "rootfs")
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(top, "secret"), []byte("host secret"), 0o600))
	must(t, os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("guest\n"), 0o640))
	must(t, os.Symlink(filepath.Join(top, "secret"), filepath.Join(root, "abs-out")))
	must(t, os.Symlink("../secret", filepath.Join(root, "rel-out")))
	must(t, os.Symlink(top, filepath.Join(root, "dir-out")))
	must(t, os.Symlink("etc", filepath.Join(root, "dir-in")))
	return files.New(root), root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGet reads a file, a directory and a symlink, and tries paths that
// lead out of the root through symlinks.
func TestGet(t *testing.T) {
	fsys, root := newGuest(t)
	e, err := fsys.Get("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(e.File)
	e.File.Close()
	if string(data) != "guest\n" || e.Type != files.TypeFile || e.Mode != 0o640 || e.Size != 6 || e.UID != os.Getuid() {
		t.Errorf("file: %q %+v", data, e.Info)
	}
	e, err = fsys.Get("/")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"abs-out", "dir-in", "dir-out", "etc", "rel-out"}; e.Type != files.TypeDirectory || !slices.Equal(e.Entries, want) {
		t.Errorf("root: %+v %v, want %v", e.Info, e.Entries, want)
	}
	// A symlink is answered as itself, whatever it points to.
	e, err = fsys.Get("/abs-out")
	if err != nil || e.Type != files.TypeSymlink || e.File != nil || !strings.HasSuffix(e.Target, "/secret") {
		t.Errorf("symlink out: %+v, %v", e, err)
	}
	// Through a symlink inside the root: followed.
	e, err = fsys.Get("/dir-in/hostname")
	if err != nil || e.Type != files.TypeFile {
		t.Fatalf("through dir-in: %+v, %v", e, err)
	}
	e.File.Close()
	// Through a symlink that leads out: refused, and the host's path
	// is in no message.
	for _, p := range []string{"/dir-out/secret", "/dir-out/rootfs/etc/hostname"} {
		_, err := fsys.Get(p)
		if !errors.Is(err, files.ErrEscapes) {
			t.Errorf("Get(%q) = %v, want ErrEscapes", p, err)
		} else if strings.Contains(err.Error(), root) {
			t.Errorf("Get(%q) = %v: names the host path", p, err)
		}
	}
	if _, err := fsys.Get("/etc/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := fsys.Get("etc/hostname"); !errors.Is(err, files.ErrBadPath) {
		t.Errorf("relative: %v", err)
	}
}

// TestWrite writes, appends, makes directories and symlinks, sets owner and
// mode, and tries to write through symlinks that lead out of the root.
func TestWrite(t *testing.T) {
	fsys, root := newGuest(t)
	mode := fs.FileMode(0o600)
	must(t, fsys.Write("/etc/new", strings.NewReader("one\n"), files.WriteOptions{UID: -1, GID: -1}))
	must(t, fsys.Write("/etc/new", strings.NewReader("two\n"), files.WriteOptions{UID: -1, GID: -1, Append: true}))
	fi := stat(t, filepath.Join(root, "etc", "new"))
	if data, _ := os.ReadFile(filepath.Join(root, "etc", "new")); string(data) != "one\ntwo\n" || fi.Mode().Perm() != files.DefaultFileMode {
		t.Errorf("append: %q %v", data, fi.Mode())
	}
	must(t, fsys.Write("/etc/new", strings.NewReader("three\n"), files.WriteOptions{UID: -1, GID: -1, Mode: &mode}))
	fi = stat(t, filepath.Join(root, "etc", "new"))
	if data, _ := os.ReadFile(filepath.Join(root, "etc", "new")); string(data) != "three\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("overwrite: %q %v", data, fi.Mode())
	}
	dmode := fs.FileMode(0o750)
	must(t, fsys.Write("/srv", nil, files.WriteOptions{Type: files.TypeDirectory, UID: -1, GID: -1, Mode: &dmode}))
	must(t, fsys.Write("/srv", nil, files.WriteOptions{Type: files.TypeDirectory, UID: -1, GID: -1}))
	if fi := stat(t, filepath.Join(root, "srv")); !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("mkdir: %v", fi.Mode())
	}
	must(t, fsys.Write("/srv/link", strings.NewReader("/etc/hostname"), files.WriteOptions{Type: files.TypeSymlink, UID: -1, GID: -1}))
	if target, err := os.Readlink(filepath.Join(root, "srv", "link")); err != nil || target != "/etc/hostname" {
		t.Errorf("symlink: %q %v", target, err)
	}
	must(t, fsys.Write("/srv/rel", strings.NewReader("../etc/new"), files.WriteOptions{Type: files.TypeSymlink, UID: -1, GID: -1}))
	if os.Getuid() == 0 {
		must(t, fsys.Write("/etc/owned", strings.NewReader("x"), files.WriteOptions{UID: 1234, GID: 2345}))
		if e, err := fsys.Get("/etc/owned"); err != nil || e.UID != 1234 || e.GID != 2345 {
			t.Errorf("owner: %+v %v", e, err)
		} else {
			e.File.Close()
		}
	}

	for _, tc := range []struct {
		name string
		path string
		opts files.WriteOptions
		want error
	}{
		{"through a directory symlink out", "/dir-out/planted", files.WriteOptions{UID: -1, GID: -1}, files.ErrEscapes},
		{"onto a symlink out", "/abs-out", files.WriteOptions{UID: -1, GID: -1}, files.ErrEscapes},
		{"onto a relative symlink out", "/rel-out", files.WriteOptions{UID: -1, GID: -1}, files.ErrEscapes},
		{"onto a symlink inside (followed, as in the guest)", "/srv/rel", files.WriteOptions{UID: -1, GID: -1}, nil},
		{"missing parent", "/no/such/dir", files.WriteOptions{UID: -1, GID: -1}, fs.ErrNotExist},
		{"the root", "/", files.WriteOptions{UID: -1, GID: -1}, files.ErrBadPath},
		{"unknown type", "/x", files.WriteOptions{Type: "fifo", UID: -1, GID: -1}, files.ErrBadPath},
		{"onto an absolute symlink (out on a sim guest's root)", "/srv/link", files.WriteOptions{UID: -1, GID: -1}, files.ErrEscapes},
		{"dot dot", "/etc/../../planted", files.WriteOptions{UID: -1, GID: -1}, files.ErrBadPath},
		{"directory over a file", "/etc/hostname", files.WriteOptions{Type: files.TypeDirectory, UID: -1, GID: -1}, fs.ErrExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fsys.Write(tc.path, strings.NewReader("planted"), tc.opts)
			if !errors.Is(err, tc.want) {
				t.Errorf("Write(%q) = %v, want %v", tc.path, err, tc.want)
			}
		})
	}
	if data, _ := os.ReadFile(filepath.Join(root, "etc", "new")); string(data) != "planted" {
		t.Errorf("write through /srv/rel: /etc/new holds %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(filepath.Dir(root), "secret")); string(data) != "host secret" {
		t.Errorf("the file outside the root changed: %q", data)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(root), "planted")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file was planted outside the root: %v", err)
	}
}

// TestDelete removes a file, a symlink (not its target) and an empty
// directory; a full directory, the root and a missing path are refused.
func TestDelete(t *testing.T) {
	fsys, root := newGuest(t)
	must(t, fsys.Delete("/abs-out"))
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "secret")); err != nil {
		t.Errorf("the symlink's target went: %v", err)
	}
	must(t, fsys.Delete("/etc/hostname"))
	must(t, fsys.Delete("/etc"))
	if err := fsys.Delete("/etc"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if err := fsys.Delete("/"); !errors.Is(err, files.ErrBadPath) {
		t.Errorf("root: %v", err)
	}
	if err := fsys.Delete("/dir-out/secret"); !errors.Is(err, files.ErrEscapes) {
		t.Errorf("through a symlink out: %v", err)
	}
}

// TestWriteBoundedCopy streams 64 MiB through Write and checks the bytes.
func TestWriteBoundedCopy(t *testing.T) {
	fsys, root := newGuest(t)
	src := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	must(t, fsys.Write("/big", bytes.NewReader(src), files.WriteOptions{UID: -1, GID: -1}))
	got, err := os.ReadFile(filepath.Join(root, "big"))
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("big file differs (%d bytes, %v)", len(got), err)
	}
}

func stat(t *testing.T, p string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
