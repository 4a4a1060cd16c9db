package qemuvm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// The config drive of a guest booted from an image: a read-only ISO 9660
// disk labelled ConfigDriveLabel holding the agent's files (certificates,
// agent.conf), which the agent package's unit mounts. A distribution's own
// initramfs does not carry files appended to it past switch_root, so the
// initrd route of the test guest does not reach such guests.
const (
	ConfigDriveLabel = "GLCONFIG"
	configDrive      = "config.iso"
	configDriveDir   = "config"
)

// isoBinary builds the ISO (genisoimage, Debian package; no root needed).
var isoBinary = "genisoimage"

// writeConfigDrive writes files into dir/config and builds dir/config.iso.
func writeConfigDrive(ctx context.Context, dir string, files []sdk.File) error {
	src := filepath.Join(dir, configDriveDir)
	if err := os.RemoveAll(src); err != nil {
		return fmt.Errorf("writing the config drive: %w", err)
	}
	if err := os.Mkdir(src, 0o700); err != nil {
		return fmt.Errorf("writing the config drive: %w", err)
	}
	defer os.RemoveAll(src)
	for _, f := range files {
		clean := filepath.Clean("/" + f.Path)[1:]
		if clean == "" || clean != f.Path || strings.Contains(clean, "/") {
			return fmt.Errorf("%w: config drive file %q: a plain file name is required", sdk.ErrInvalid, f.Path)
		}
		if err := os.WriteFile(filepath.Join(src, clean), f.Data, os.FileMode(f.Mode&0o777)); err != nil {
			return fmt.Errorf("writing the config drive: %w", err)
		}
	}
	out := filepath.Join(dir, configDrive)
	cmd := exec.CommandContext(ctx, isoBinary, "-quiet", "-V", ConfigDriveLabel, "-r", "-J", "-o", out+".tmp", src)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		_ = os.Remove(out + ".tmp")
		return fmt.Errorf("building the config drive with %s: %w: %s", isoBinary, err, strings.TrimSpace(msg.String()))
	}
	if err := os.Chmod(out+".tmp", 0o600); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

// configDriveArgs attaches dir/config.iso read-only, if it exists.
func configDriveArgs(dir string) []string {
	p := filepath.Join(dir, configDrive)
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	return []string{
		"-blockdev", "driver=file,filename=" + qemuOpt(p) + ",node-name=config-file,read-only=on",
		"-blockdev", "driver=raw,file=config-file,node-name=config,read-only=on",
		"-device", "virtio-blk-pci,drive=config,id=dev-config,bus=pcie.0,addr=0x6,serial=guestlink-config",
	}
}
