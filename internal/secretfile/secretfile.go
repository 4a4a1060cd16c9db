// Package secretfile reads a secret setting (a database URL with its
// password, a cluster join token) from a file, so that it never has to be
// given on a command line, where every local user sees it in ps.
package secretfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxSize is the largest file Read accepts.
const MaxSize = 64 << 10

// Read returns the one-line value held by the file at path, without the
// surrounding white space. It refuses a file that is not regular, that
// group or others may read or write (only modes 0600 and 0400 pass: chmod
// 600 PATH), that is owned by someone other than root or the current user,
// that is empty, larger than MaxSize or holds more than one line. Errors
// name the file, never its content.
func Read(path string) (string, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("secret file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("secret file %s: readable or writable by group or others (mode %04o): chmod 600 %s", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("secret file %s: owned by uid %d, neither root nor this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return "", fmt.Errorf("secret file %s: larger than %d bytes", path, MaxSize)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return "", fmt.Errorf("secret file %s: empty", path)
	}
	if bytes.ContainsAny(data, "\r\n\x00") {
		return "", fmt.Errorf("secret file %s: holds more than one line (want the value alone)", path)
	}
	return string(data), nil
}
