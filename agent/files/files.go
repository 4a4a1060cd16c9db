// Package files reads and writes files inside a guest's root for the agent's
// /1.0/files route, as LXD's agent does: every path is absolute in the
// guest, resolved under the root (the guest's directory on a simulated
// guest, "/" on a VM) with os.Root, so that no symlink, in the middle of a
// path or at its end, leads out of the root: a symlink inside it is
// followed as in the guest, one that leads out (on a simulated guest, any
// absolute one) is refused. A symlink asked for itself (GET) is answered
// as a symlink, never followed. File contents are streamed
// through a fixed buffer: a file of any size takes the same memory.
package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/guestlink/guestlink/link/guestpath"
)

// Types of X-LXD-type.
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
	TypeSymlink   = "symlink"
)

// Default modes of what Write creates when no mode is given (LXD's).
const (
	DefaultFileMode fs.FileMode = 0o644
	DefaultDirMode  fs.FileMode = 0o755
)

// MaxSymlinkTarget is the longest symlink target Write accepts (PATH_MAX).
const MaxSymlinkTarget = 4096

// copyBuffer is the buffer of each copy: the memory a transfer takes.
const copyBuffer = 64 << 10

// Error kinds: the link port answers ErrBadPath 400, ErrEscapes 403,
// fs.ErrNotExist 404, fs.ErrPermission 403 and fs.ErrExist 409.
var (
	// ErrBadPath is a path that is not absolute, holds a NUL or a ".."
	// element (guestpath.ErrInvalid), or an option that is not valid.
	ErrBadPath = guestpath.ErrInvalid
	// ErrEscapes is a path that a symlink leads out of the guest's root.
	ErrEscapes = errors.New("path leads out of the guest's root")
)

// Clean checks a guest path and returns it relative to the root ("." for
// "/"), as guestpath.Clean does; its errors wrap ErrBadPath.
func Clean(p string) (string, error) {
	rel, err := guestpath.Clean(p)
	if err != nil {
		return "", err
	}
	return rel, nil
}

// FS is the file system of one guest. It holds no open file between calls.
type FS struct {
	root string
}

// New returns the file system under root, a directory of this machine.
func New(root string) *FS { return &FS{root: root} }

// Info is what X-LXD-uid, -gid, -mode and -type carry.
type Info struct {
	Type string
	UID  int
	GID  int
	Mode fs.FileMode // permission bits with setuid, setgid and sticky
}

// Entry is the answer of Get: for a file, File to stream (the caller closes
// it) and its Size; for a directory, the names of its Entries, sorted; for a
// symlink, its Target (not followed).
type Entry struct {
	Info
	File    *os.File
	Size    int64
	Entries []string
	Target  string
}

// WriteOptions are the headers of a POST.
type WriteOptions struct {
	// Type is TypeFile (also for ""), TypeDirectory or TypeSymlink.
	Type string
	// UID and GID are the owner to set; -1 leaves it (a new file is the
	// agent's).
	UID, GID int
	// Mode is the permission to set; nil leaves an existing file's and
	// gives a new one DefaultFileMode or DefaultDirMode.
	Mode *fs.FileMode
	// Append appends to a file instead of replacing its content.
	Append bool
}

func (f *FS) open() (*os.Root, error) {
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return nil, fmt.Errorf("opening the guest's root: %w", errors.Unwrap(err))
	}
	return r, nil
}

// escapes is os.Root's (unexported) error for a path that leads out of
// the root, taken once from a lexical escape so that errors are matched
// by identity, never by text.
var escapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("..")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return nil
})

// kind turns an os error about p into one of the package's kinds, with a
// message that names the guest path only (never the root's host path).
func kind(op, p string, err error) error {
	var pe *fs.PathError
	inner := err
	if errors.As(err, &pe) {
		inner = pe.Err
	}
	if e := escapes(); e != nil && errors.Is(inner, e) {
		return fmt.Errorf("%s %q: %w", op, p, ErrEscapes)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		inner = le.Err
	}
	if errors.Is(inner, errLoop) {
		return fmt.Errorf("%s %q: %w: a symlink, not followed", op, p, ErrBadPath)
	}
	return fmt.Errorf("%s %q: %w", op, p, inner)
}

func infoOf(fi fs.FileInfo) Info {
	in := Info{Type: TypeFile, UID: -1, GID: -1, Mode: fi.Mode().Perm() | fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)}
	switch {
	case fi.IsDir():
		in.Type = TypeDirectory
	case fi.Mode()&fs.ModeSymlink != 0:
		in.Type = TypeSymlink
	}
	owner(fi, &in)
	return in
}

// Get returns what is at p: a regular file opened for reading, a
// directory's entry names or a symlink's target. Anything else (a device, a
// socket, a FIFO) is refused with ErrBadPath: reading it could block or
// never end.
func (f *FS) Get(p string) (*Entry, error) {
	rel, err := Clean(p)
	if err != nil {
		return nil, err
	}
	r, err := f.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	if err != nil {
		return nil, kind("reading", p, err)
	}
	e := &Entry{Info: infoOf(fi)}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if e.Target, err = r.Readlink(rel); err != nil {
			return nil, kind("reading symlink", p, err)
		}
	case fi.IsDir():
		d, err := r.Open(rel)
		if err != nil {
			return nil, kind("reading directory", p, err)
		}
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return nil, kind("reading directory", p, err)
		}
		slices.Sort(names)
		e.Entries = names
	case fi.Mode().IsRegular():
		file, err := r.OpenFile(rel, os.O_RDONLY|noFollow, 0)
		if err != nil {
			return nil, kind("reading", p, err)
		}
		// What was opened is what is answered: the checks above saw
		// the path, the file may have been replaced since.
		st, err := file.Stat()
		if err != nil || !st.Mode().IsRegular() {
			file.Close()
			return nil, fmt.Errorf("reading %q: %w: no longer a regular file", p, ErrBadPath)
		}
		e.Info, e.File, e.Size = infoOf(st), file, st.Size()
	default:
		return nil, fmt.Errorf("reading %q: %w: not a regular file, directory or symlink (%s)", p, ErrBadPath, fi.Mode().Type())
	}
	return e, nil
}

// Write creates or writes p from body as opts say: a file's content, a
// symlink's target (at most MaxSymlinkTarget bytes), nothing for a
// directory (an existing directory only gets its owner and mode). The
// parent must exist.
func (f *FS) Write(p string, body io.Reader, opts WriteOptions) error {
	rel, err := Clean(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("writing %q: %w: the root itself", p, ErrBadPath)
	}
	r, err := f.open()
	if err != nil {
		return err
	}
	defer r.Close()
	switch opts.Type {
	case "", TypeFile:
		return writeFile(r, rel, p, body, opts)
	case TypeDirectory:
		return mkdir(r, rel, p, opts)
	case TypeSymlink:
		return symlink(r, rel, p, body, opts)
	}
	return fmt.Errorf("writing %q: %w: unknown type %q (want file, directory or symlink)", p, ErrBadPath, opts.Type)
}

func writeFile(r *os.Root, rel, p string, body io.Reader, opts WriteOptions) error {
	flags := os.O_WRONLY | os.O_CREATE | noFollow
	if opts.Append {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	_, statErr := r.Lstat(rel)
	isNew := errors.Is(statErr, fs.ErrNotExist)
	mode := DefaultFileMode
	if opts.Mode != nil {
		mode = *opts.Mode
	}
	file, err := r.OpenFile(rel, flags, mode.Perm())
	if err != nil {
		return kind("writing", p, err)
	}
	st, err := file.Stat()
	if err != nil || !st.Mode().IsRegular() {
		file.Close()
		return fmt.Errorf("writing %q: %w: not a regular file", p, ErrBadPath)
	}
	if err := attrs(file, isNew, mode, opts); err != nil {
		file.Close()
		return kind("writing", p, err)
	}
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(onlyWriter{file}, onlyReader{body}, buf); err != nil {
		file.Close()
		return fmt.Errorf("writing %q: %w", p, err)
	}
	if err := file.Close(); err != nil {
		return kind("writing", p, err)
	}
	return nil
}

// attrs sets owner and mode on an open file or directory: the mode when
// given or when the file is new (the umask took bits off), the owner when
// given.
func attrs(file *os.File, isNew bool, mode fs.FileMode, opts WriteOptions) error {
	if opts.UID >= 0 || opts.GID >= 0 {
		if err := file.Chown(opts.UID, opts.GID); err != nil {
			return err
		}
	}
	if opts.Mode != nil || isNew {
		// Chmod after chown: chown clears setuid and setgid.
		if err := file.Chmod(mode); err != nil {
			return err
		}
	}
	return nil
}

func mkdir(r *os.Root, rel, p string, opts WriteOptions) error {
	mode := DefaultDirMode
	if opts.Mode != nil {
		mode = *opts.Mode
	}
	isNew := true
	if err := r.Mkdir(rel, mode.Perm()); err != nil {
		fi, serr := r.Lstat(rel)
		if !errors.Is(err, fs.ErrExist) || serr != nil || !fi.IsDir() {
			return kind("creating directory", p, err)
		}
		isNew = false
	}
	d, err := r.OpenFile(rel, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return kind("creating directory", p, err)
	}
	defer d.Close()
	if err := attrs(d, isNew, mode, opts); err != nil {
		return kind("creating directory", p, err)
	}
	return nil
}

func symlink(r *os.Root, rel, p string, body io.Reader, opts WriteOptions) error {
	target, err := io.ReadAll(io.LimitReader(body, MaxSymlinkTarget+1))
	if err != nil {
		return fmt.Errorf("creating symlink %q: %w", p, err)
	}
	switch {
	case len(target) == 0:
		return fmt.Errorf("creating symlink %q: %w: empty target", p, ErrBadPath)
	case len(target) > MaxSymlinkTarget:
		return fmt.Errorf("creating symlink %q: %w: target longer than %d bytes", p, ErrBadPath, MaxSymlinkTarget)
	case strings.IndexByte(string(target), 0) >= 0:
		return fmt.Errorf("creating symlink %q: %w: target holds a NUL byte", p, ErrBadPath)
	}
	if err := r.Symlink(string(target), rel); err != nil {
		return kind("creating symlink", p, err)
	}
	if opts.UID >= 0 || opts.GID >= 0 {
		if err := r.Lchown(rel, opts.UID, opts.GID); err != nil {
			return kind("creating symlink", p, err)
		}
	}
	return nil
}

// Delete removes the file, symlink (not what it points to) or empty
// directory at p.
func (f *FS) Delete(p string) error {
	rel, err := Clean(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("deleting %q: %w: the root itself", p, ErrBadPath)
	}
	r, err := f.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Remove(rel); err != nil {
		return kind("deleting", p, err)
	}
	return nil
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo, so that io.CopyBuffer
// copies through its fixed buffer instead of a path that may grow one.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }
