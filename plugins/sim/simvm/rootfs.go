package simvm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// buildRoot makes the stand-in root: serial ports as FIFOs, an empty
// /dev/lxd and a freshly written config drive. Stale sockets of an earlier
// boot are removed, as a rebooted machine would not have them either.
func (v *vmm) buildRoot() error {
	ports := filepath.Dir(v.paths.Port(PortCurrent))
	for _, d := range []string{ports, filepath.Dir(v.paths.DevlxdSocket())} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("building root: %w", err)
		}
	}
	entries, err := os.ReadDir(ports)
	if err != nil {
		return fmt.Errorf("building root: %w", err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(ports, e.Name())); err != nil {
			return fmt.Errorf("building root: %w", err)
		}
	}
	wired, unwired := v.cfg.Layout.Ports()
	for _, name := range append([]string{wired}, unwired...) {
		if err := syscall.Mkfifo(v.paths.Port(name), 0o600); err != nil {
			return fmt.Errorf("creating port %s: %w", name, err)
		}
	}
	for _, stale := range []string{v.paths.DevlxdSocket(), v.paths.Link()} {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing stale socket: %w", err)
		}
	}
	drive := v.paths.ConfigDrive()
	if err := os.RemoveAll(drive); err != nil {
		return fmt.Errorf("clearing config drive: %w", err)
	}
	if err := os.MkdirAll(drive, 0o700); err != nil {
		return fmt.Errorf("creating config drive: %w", err)
	}
	for _, f := range v.cfg.Files {
		name := filepath.Join(drive, filepath.FromSlash(f.Path))
		mode := os.FileMode(f.Mode) & os.ModePerm
		if mode == 0 {
			mode = 0o600
		}
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
		if err := os.WriteFile(name, f.Data, mode); err != nil {
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
		if err := os.Chmod(name, mode); err != nil { // WriteFile's mode is masked by the umask
			return fmt.Errorf("writing config drive file %s: %w", f.Path, err)
		}
	}
	return nil
}

// BootID returns where a guest's stand-in kernel boot id is: a process is not
// a kernel, so the VMM stands in a new id at every boot (start or
// system_reset), as the agent's boot state needs (docs/guest-link.md).
func (p Paths) BootID() string {
	return filepath.Join(p.Root(), "proc", "sys", "kernel", "random", "boot_id")
}

// writeBootID stands in a fresh random boot id (the kernel's format).
func writeBootID(p Paths) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("making a boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	if err := os.MkdirAll(filepath.Dir(p.BootID()), 0o755); err != nil {
		return fmt.Errorf("writing boot id: %w", err)
	}
	if err := writeFileAtomic(p.BootID(), []byte(id), 0o444); err != nil {
		return fmt.Errorf("writing boot id: %w", err)
	}
	return nil
}
