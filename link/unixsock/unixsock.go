// Package unixsock creates Unix socket listeners whose file never exists with
// a wider mode than asked for, whatever the process umask and without
// changing it (syscall.Umask is process-wide, so racy in a threaded program).
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// Listen listens on a new Unix socket at path with permission mode, so
// that nobody can connect to it before it has its final mode. Listen never
// replaces anything: if path exists the error wraps fs.ErrExist (callers
// remove a stale socket first). Closing the listener removes path unless
// SetUnlinkOnClose(false) was called on it.
//
// The socket is bound at path itself with the mode given to the socket
// before bind (Linux creates the file with the socket's mode less the
// umask) and listens only once the file is seen with that mode: until
// listen(2) a connect is refused, whatever the file's mode. Where the umask
// takes bits of mode away (mode 0660 under umask 022), it is bound in a
// fresh 0700 directory next to path instead, given its mode there and
// linked into place. That way's socket keeps the removed directory's entry
// until it closes, and its close then pays for freeing the directory
// (about 100 µs of CPU on ext4 and a wait on its journal, against 5 µs for
// a socket bound in place: a daemon closing 10,000 guests' links paid it
// 10,000 times), so it is kept for the case that needs it.
func Listen(path string, mode fs.FileMode) (net.Listener, error) {
	ln, err := listenInPlace(path, mode)
	if errors.Is(err, errModeNarrowed) {
		return listenLinked(path, mode)
	}
	return ln, err
}

// errModeNarrowed is listenInPlace's failure when the file bound did not
// get the mode asked for (the umask took bits away).
var errModeNarrowed = errors.New("socket file created without its mode")

// listenInPlace binds a socket at path with mode set on the socket before
// bind, and listens once the file has exactly that mode; otherwise it
// removes the file and fails with errModeNarrowed.
func listenInPlace(path string, mode fs.FileMode) (net.Listener, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listening on %q: %w", path, os.NewSyscallError("socket", err))
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // net.FileListener holds a duplicate
	if err := syscall.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return nil, fmt.Errorf("listening on %q: %w", path, os.NewSyscallError("fchmod", err))
	}
	name, closeDir, err := bindName(path)
	if err != nil {
		return nil, fmt.Errorf("listening on %q: %w", path, err)
	}
	err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: name})
	closeDir()
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listening on %q: %w", path, fs.ErrExist)
	}
	if err != nil {
		return nil, fmt.Errorf("listening on %q: %w", path, os.NewSyscallError("bind", err))
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != mode.Perm() {
		_ = os.Remove(path) // bound, never listened on: no connection reached it
		return nil, errModeNarrowed
	}
	// The kernel caps the backlog at net.core.somaxconn, as Go's own
	// listeners ask.
	if err := syscall.Listen(fd, 1<<16-1); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening on %q: %w", path, os.NewSyscallError("listen", err))
	}
	fl, err := net.FileListener(f)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening on %q: %w", path, err)
	}
	ul, ok := fl.(*net.UnixListener)
	if !ok {
		fl.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening on %q: not a Unix listener: %T", path, fl)
	}
	return &listener{UnixListener: ul, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// bindName returns the name to bind path under: path itself, or, when it
// is too long for sun_path, /proc/self/fd/<its directory's descriptor>/<its
// base>; closeDir closes that descriptor once bound.
func bindName(path string) (name string, closeDir func(), err error) {
	if len(path) <= maxPath {
		return path, func() {}, nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path)), func() { d.Close() }, nil
}

// listenLinked binds the socket in a fresh 0700 directory next to path,
// sets its mode there and links it into place.
func listenLinked(path string, mode fs.FileMode) (net.Listener, error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".sock-")
	if err != nil {
		return nil, fmt.Errorf("listening on %q: creating a private directory: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	ln, err := bind(tmpDir, tmp)
	if err != nil {
		return nil, fmt.Errorf("listening on %q: %w", path, err)
	}
	if err := os.Chmod(tmp, mode.Perm()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("setting mode of socket %q: %w", path, err)
	}
	// link(2) is atomic and fails if path exists, unlike rename(2).
	if err := os.Link(tmp, path); err != nil {
		ln.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("listening on %q: %w", path, fs.ErrExist)
		}
		return nil, fmt.Errorf("listening on %q: %w", path, err)
	}
	return &listener{UnixListener: ln, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// maxPath is the longest socket path bind(2) takes (sun_path less its NUL).
const maxPath = 107

// bind listens on the Unix socket tmp (in directory dir). A name too long
// for sun_path, which the temporary one can be where the final one is not,
// is bound through /proc/self/fd/<dir's fd> instead.
func bind(dir, tmp string) (*net.UnixListener, error) {
	name := tmp
	if len(tmp) > maxPath {
		d, err := os.Open(dir)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		name = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(tmp))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// listener is a Unix listener whose file is addr (bound there, through
// /proc/self/fd, or under another name and linked there): it reports addr
// and removes it when closed.
type listener struct {
	*net.UnixListener
	addr     *net.UnixAddr
	once     sync.Once
	keepFile atomic.Bool
}

// SetUnlinkOnClose sets whether Close removes the socket file (by default
// it does), like net.UnixListener.SetUnlinkOnClose.
func (l *listener) SetUnlinkOnClose(unlink bool) { l.keepFile.Store(!unlink) }

// Addr returns the socket's path.
func (l *listener) Addr() net.Addr { return l.addr }

// Close stops listening and removes the socket file (once).
func (l *listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if l.keepFile.Load() {
			return
		}
		if rerr := os.Remove(l.addr.Name); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	})
	return err
}

var _ net.Listener = (*listener)(nil)
