package pluginhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/guestlink/guestlink/errdefs"
)

// CheckName returns an error (errdefs.ErrInvalid) unless name can name a
// plugin: a plain file name of the plugin directory, not hidden, not
// SumsFile.
func CheckName(name string) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || name == SumsFile ||
		strings.ContainsAny(name, "\x00 \t\n") {
		return fmt.Errorf("invalid backend name %q: must be a plain file name, not hidden, not %s: %w", name, SumsFile, errdefs.ErrInvalid)
	}
	return nil
}

// Install copies the plugin binary at src into the plugin directory as name
// and loads it without a daemon restart. The copy is written to a hidden
// temporary file (mode 0755, owned by the daemon's user), synced and
// renamed over any earlier binary of that name, so a running plugin keeps
// its file and a reader never sees half a binary; then its sha256 replaces
// name's line in SumsFile (other lines are kept; the file is rewritten the
// same way, mode 0644). Finally Reload(ctx, name) starts it: a new plugin
// gets a supervisor, a known one is restarted on the new binary and the
// daemon recovers its guests. It returns the plugin's status once the new
// launch attempt concluded or ctx ended.
//
// The plugin directory must be trusted (CheckTrusted) before anything is
// written. src is read by the daemon.
func (h *Host) Install(ctx context.Context, name, src string) (Status, error) {
	if err := CheckName(name); err != nil {
		return Status{}, fmt.Errorf("installing backend: %w", err)
	}
	if err := h.checkStarted(); err != nil {
		return Status{}, fmt.Errorf("installing backend %q: %w", name, err)
	}
	dir := h.cfg.Dir
	if err := CheckTrusted("plugin directory", dir); err != nil {
		return Status{}, refused(fmt.Errorf("installing backend %q: %w", name, err))
	}
	sum, err := copyBinary(src, dir, name)
	if err != nil {
		return Status{}, fmt.Errorf("installing backend %q from %q: %w", name, src, err)
	}
	if err := setChecksum(dir, name, sum); err != nil {
		return Status{}, fmt.Errorf("installing backend %q: %w", name, err)
	}
	h.cfg.Logger.Info("plugin installed", "plugin", name, "from", src, "sha256", hex.EncodeToString(sum))
	return h.Reload(ctx, name)
}

// Reload re-reads SumsFile for the named plugin and restarts it on the
// binary now in the plugin directory, without a daemon restart: the
// directory, SumsFile and the binary must be trusted and the binary's
// sha256 must be the one SumsFile gives (errors wrap ErrChecksum and show
// both hashes). A plugin rejected before is accepted again once it passes.
// A name not known yet (a binary added to the directory since Start) is
// discovered and started. On a failed check a running plugin process is
// left running; the error says why. It returns the plugin's status once
// the new launch attempt concluded or ctx ended; the daemon's OnRestart
// follows as for any restart.
func (h *Host) Reload(ctx context.Context, name string) (Status, error) {
	if err := CheckName(name); err != nil {
		return Status{}, fmt.Errorf("reloading backend: %w", err)
	}
	if err := h.checkStarted(); err != nil {
		return Status{}, fmt.Errorf("reloading backend %q: %w", name, err)
	}
	c, err := checkInstalled(h.cfg.Dir, name)
	if err != nil {
		return Status{}, refused(fmt.Errorf("reloading backend %q: %w", name, err))
	}
	h.mu.Lock()
	m, known := h.plugins[name]
	if !known {
		m = newManaged(h, c)
		m.running = false // RestartWait starts its supervisor
		h.plugins[name] = m
	}
	h.mu.Unlock()
	if c.rejected != nil {
		h.cfg.Logger.Error("plugin reload rejected", "plugin", name, "error", c.rejected)
		return m.status(), refused(fmt.Errorf("reloading backend %q: %w", name, c.rejected))
	}
	m.mu.Lock()
	m.sum, m.rejected = c.sum, nil
	m.mu.Unlock()
	return h.RestartWait(ctx, name)
}

// refused gives a checksum or trust refusal the errdefs kind
// ErrConflict (the API answers 409), keeping its message.
func refused(err error) error {
	if errors.Is(err, ErrChecksum) || errors.Is(err, ErrUntrusted) {
		return &hostError{msg: err.Error(), errs: []error{err, errdefs.ErrConflict}}
	}
	return err
}

// checkStarted fails unless Start was called and Close was not.
func (h *Host) checkStarted() error {
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	switch {
	case !started:
		return fmt.Errorf("plugin host not started: %w", errdefs.ErrUnavailable)
	case h.ctx.Err() != nil:
		return fmt.Errorf("plugin host closed: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// checkInstalled examines one plugin of dir as discover does (verify: trust of the
// directory, SumsFile and the binary, and the binary's checksum), after
// making sure the binary exists and is an executable file. A failed trust
// check or a missing binary is an error; a checksum problem is the
// candidate's rejected (wrapping ErrChecksum, with both hashes).
func checkInstalled(dir, name string) (candidate, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return candidate{name: name, path: path}, fmt.Errorf("no plugin binary %q: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return candidate{name: name, path: path}, fmt.Errorf("reading plugin binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return candidate{name: name, path: path}, fmt.Errorf("plugin binary %q is not an executable file: %w", path, errdefs.ErrInvalid)
	}
	return verify(dir, name)
}

// copyBinary copies src to dir/name through a synced temporary file and a
// rename, mode 0755, and returns the sha256 of what it wrote.
func copyBinary(src, dir, name string) ([]byte, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file: %w", errdefs.ErrInvalid)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".install-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// setChecksum writes sum as name's line of dir's SumsFile, keeping every
// other line (a missing SumsFile is created), through a temporary file and
// a rename, mode 0644.
func setChecksum(dir, name string, sum []byte) error {
	path := filepath.Join(dir, SumsFile)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading checksums: %w", err)
	}
	if _, err := parseChecksums(path, old); err != nil {
		return fmt.Errorf("refusing to rewrite %s: %w", path, err)
	}
	var buf bytes.Buffer
	for _, line := range strings.SplitAfter(string(old), "\n") {
		if line == "" {
			continue
		}
		if _, file, ok := strings.Cut(strings.TrimRight(line, "\r\n"), " "); ok && len(file) > 1 && file[1:] == name {
			continue
		}
		buf.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			buf.WriteByte('\n')
		}
	}
	fmt.Fprintf(&buf, "%s  %s\n", hex.EncodeToString(sum), name)
	return writeFileAtomic(dir, SumsFile, buf.Bytes(), 0o644)
}

// writeFileAtomic writes data to dir/name through a synced temporary file
// and a rename.
func writeFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
