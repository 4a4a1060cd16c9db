package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// isExt reports whether head (the first 4 KiB of a file) holds an ext2/3/4
// superblock: magic 0xEF53 at byte 1080.
func isExt(head []byte) bool {
	return len(head) >= 1082 && head[1080] == 0x53 && head[1081] == 0xEF
}

// extractBoot copies the newest /boot/vmlinuz-* and its /boot/initrd.img-*
// out of the ext filesystem image img into kernel and initrd with debugfs
// (read-only, no mount). It returns the names found in /boot ("" for none).
func extractBoot(ctx context.Context, img, kernel, initrd string) (string, string, error) {
	if _, err := exec.LookPath("debugfs"); err != nil {
		return "", "", fmt.Errorf("debugfs (e2fsprogs) is needed to take the kernel from an image: %w", err)
	}
	out, err := debugfs(ctx, img, "ls -p /boot")
	if err != nil {
		return "", "", err
	}
	var kernels []string
	names := map[string]bool{}
	// Lines of ls -p: /inode/mode/uid/gid/name/size/
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "/")
		if len(f) < 7 || !strings.HasPrefix(f[2], "10") { // regular files only (mode 100644)
			continue
		}
		name := f[5]
		names[name] = true
		if strings.HasPrefix(name, "vmlinuz-") {
			kernels = append(kernels, name)
		}
	}
	if len(kernels) == 0 {
		return "", "", errors.New("no /boot/vmlinuz-* in the image")
	}
	slices.Sort(kernels)
	k := kernels[len(kernels)-1]
	if err := dump(ctx, img, "/boot/"+k, kernel); err != nil {
		return "", "", err
	}
	i := "initrd.img-" + strings.TrimPrefix(k, "vmlinuz-")
	if !names[i] {
		return k, "", nil
	}
	if err := dump(ctx, img, "/boot/"+i, initrd); err != nil {
		_ = os.Remove(kernel)
		return "", "", err
	}
	return k, i, nil
}

func debugfs(ctx context.Context, img, request string) (string, error) {
	cmd := exec.CommandContext(ctx, "debugfs", "-R", request, img)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("debugfs -R %q: %w: %s", request, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// dump copies one file out of the image to dst (0400).
func dump(ctx context.Context, img, path, dst string) error {
	if _, err := debugfs(ctx, img, fmt.Sprintf("dump %q %q", path, dst)); err != nil {
		return err
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return fmt.Errorf("taking %s from the image: %w", path, err)
	}
	if fi.Size() == 0 {
		_ = os.Remove(dst)
		return fmt.Errorf("taking %s from the image: empty", path)
	}
	return os.Chmod(dst, 0o400)
}
