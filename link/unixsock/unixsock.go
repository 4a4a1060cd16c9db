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
)

// Listen listens on a new Unix socket at path with permission mode. The
// socket is bound in a fresh 0700 directory next to path, given its mode
// there, and then linked into place, so nobody can connect to it before it
// has its final mode. Listen never replaces anything: if path exists the
// error wraps fs.ErrExist (callers remove a stale socket first). Closing the
// listener removes path unless SetUnlinkOnClose(false) was called on it.
func Listen(path string, mode fs.FileMode) (net.Listener, error) {
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

// listener is a Unix listener bound under another name and linked to addr:
// it reports addr and removes it when closed.
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
