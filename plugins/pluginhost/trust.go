package pluginhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUntrusted is the kind of a path the daemon refuses to trust: it, or a
// directory above it, can be changed by a user other than the daemon's
// user and root. The daemon runs plugin binaries (as its own user, often
// root) and keeps keys in its state directory; whoever can replace them
// owns the daemon.
var ErrUntrusted = errors.New("untrusted path")

// CheckTrusted returns an error wrapping ErrUntrusted unless path (a file or
// a directory; what names it in the message, e.g. "plugin directory") and
// every directory above it up to / can be changed only by the daemon's
// user or root:
//
//   - each is owned by the daemon's effective user or by root;
//   - path itself is not writable by group or others;
//   - a directory above it is not writable by group or others, unless it
//     has the sticky bit (like /tmp), where others cannot rename or remove
//     what they do not own.
//
// A symbolic link is followed and its target checked the same way. The
// error names the path, its mode and owner, and the fix (chmod go-w PATH,
// or chown). A path that cannot be examined is an error too.
func CheckTrusted(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("checking %s %q: %w", what, path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("checking %s %q: %w", what, path, err)
	}
	if err := checkOwnerMode(what, path, abs, real, false); err != nil {
		return err
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		if err := checkOwnerMode(what, path, abs, dir, true); err != nil {
			return err
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// checkOwnerMode checks one path of CheckTrusted: p is path itself (abs, or
// the target of a link) or, if parent, one of the directories above it.
func checkOwnerMode(what, path, abs, p string, parent bool) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("checking %s %q: %w", what, path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("checking %s %q: no owner information for %q: %w", what, path, p, ErrUntrusted)
	}
	subject := fmt.Sprintf("%s %q", what, path)
	if p != abs {
		if parent {
			subject += fmt.Sprintf(": directory %q above it", p)
		} else {
			subject += fmt.Sprintf(": its target %q", p)
		}
	}
	uid, me := int(st.Uid), os.Geteuid()
	if uid != me && uid != 0 {
		return fmt.Errorf("%s is owned by uid %d (mode %v), not by the daemon's user (uid %d) or root; fix: chown %d %s: %w",
			subject, uid, fi.Mode(), me, me, p, ErrUntrusted)
	}
	mode := fi.Mode()
	if mode.Perm()&0o022 == 0 {
		return nil
	}
	if parent && mode.IsDir() && mode&fs.ModeSticky != 0 {
		return nil
	}
	by := "group and others"
	switch {
	case mode.Perm()&0o022 == 0o020:
		by = "its group"
	case mode.Perm()&0o022 == 0o002:
		by = "others"
	}
	return fmt.Errorf("%s is writable by %s (mode %v, owner uid %d); fix: chmod go-w %s: %w",
		subject, by, mode, uid, p, ErrUntrusted)
}
