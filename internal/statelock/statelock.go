// Package statelock makes a state directory one daemon's: an exclusive
// flock(2) on DIR/guestlinkd.lock, taken before anything else in the
// directory is opened and held until everything is closed. The holder's PID
// is written into the file so that a refused process can name it. The
// kernel drops the lock when the holder's descriptor is closed, so a daemon
// killed with SIGKILL leaves no stale lock.
package statelock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FileName is the lock file's name inside the state directory.
const FileName = "guestlinkd.lock"

// ErrHeld is returned (wrapped in a *HeldError) by Acquire when another
// process, or another Lock of this process, holds the directory.
var ErrHeld = errors.New("state directory in use")

// HeldError says who holds a state directory's lock.
type HeldError struct {
	// Dir is the state directory.
	Dir string
	// PID is the holder's process id, as it wrote it into the lock file;
	// 0 if the file held none yet (the holder had only just locked it).
	PID int
}

// Error names the directory and the holder's PID.
func (e *HeldError) Error() string {
	lock := filepath.Join(e.Dir, FileName)
	if e.PID == 0 {
		return fmt.Sprintf("state directory %s is in use: another process holds %s (it has not written its PID yet)", e.Dir, lock)
	}
	return fmt.Sprintf("state directory %s is in use by PID %d (it holds %s): stop that daemon first, or give another --state-dir", e.Dir, e.PID, lock)
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held state directory lock.
type Lock struct {
	f    *os.File
	path string
}

// Acquire locks the state directory dir, which must exist: it opens (or
// creates, mode 0600) dir/FileName without following a symlink, takes an
// exclusive flock without waiting, and writes the calling process's PID
// into it. If the lock is held it returns a *HeldError (errors.Is ErrHeld)
// naming the holder's PID, having changed nothing. The descriptor is
// close-on-exec, so child processes (plugins, guests) never hold the lock.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking state directory %s: %w", dir, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking state directory %s: %w", dir, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("locking state directory %s: %s is not a regular file", dir, path)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, PID: readPID(f)}
		}
		return nil, fmt.Errorf("locking state directory %s: flock %s: %w", dir, path, err)
	}
	l := &Lock{f: f, path: path}
	// A file left by an older holder may have another mode; the lock
	// file is the daemon's alone.
	if fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			l.Release()
			return nil, fmt.Errorf("locking state directory %s: %w", dir, err)
		}
	}
	// Written at offset 0, then cut to length: a process refused in
	// between reads the first line, which is already this PID.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if _, err := f.WriteAt(pid, 0); err != nil {
		l.Release()
		return nil, fmt.Errorf("locking state directory %s: writing the PID to %s: %w", dir, path, err)
	}
	if err := f.Truncate(int64(len(pid))); err != nil {
		l.Release()
		return nil, fmt.Errorf("locking state directory %s: writing the PID to %s: %w", dir, path, err)
	}
	return l, nil
}

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release empties the lock file and releases the lock. It is safe to call
// on a nil Lock and more than once. The file stays: removing it would let
// a process that opened it before the removal lock a file nobody else
// sees.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0) // still held: nobody reads a PID that is going
	if err := f.Close(); err != nil {
		return fmt.Errorf("releasing %s: %w", l.path, err)
	}
	return nil
}

// flock calls flock(2), retrying on EINTR.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// readPID returns the PID on the first line of the lock file, 0 if it
// holds none.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
