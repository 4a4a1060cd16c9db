package guestimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// kernelTree returns the directory the kernel package is unpacked in and the
// kernel release, downloading and unpacking the package when needed.
func kernelTree(ctx context.Context, opts Options, logf func(string, ...any)) (string, string, error) {
	deb := opts.KernelDeb
	if deb == "" {
		pkg, err := versionedKernelPackage(ctx, opts.KernelPackage)
		if err != nil {
			return "", "", err
		}
		debDir := filepath.Join(opts.OutDir, "deb")
		if err := os.MkdirAll(debDir, 0o755); err != nil {
			return "", "", err
		}
		matches, _ := filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
		if len(matches) == 0 {
			logf("apt-get download %s", pkg)
			cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
			cmd.Dir = debDir
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", "", fmt.Errorf("downloading %s: %w: %s", pkg, err, out)
			}
			matches, _ = filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
			if len(matches) == 0 {
				return "", "", fmt.Errorf("downloading %s: no .deb appeared in %s", pkg, debDir)
			}
		}
		sort.Strings(matches)
		deb = matches[len(matches)-1]
	}
	kdir := filepath.Join(opts.OutDir, "kernel", strings.TrimSuffix(filepath.Base(deb), ".deb"))
	if _, err := os.Stat(filepath.Join(kdir, ".unpacked")); err != nil {
		logf("dpkg-deb -x %s", filepath.Base(deb))
		os.RemoveAll(kdir)
		if err := os.MkdirAll(kdir, 0o755); err != nil {
			return "", "", err
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, kdir).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("unpacking %s: %w: %s", deb, err, out)
		}
		if err := os.WriteFile(filepath.Join(kdir, ".unpacked"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(kdir, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return "", "", fmt.Errorf("kernel package %s: want one boot/vmlinuz-*, found %d", deb, len(kernels))
	}
	return kdir, strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-"), nil
}

// versionedKernelPackage returns the linux-image-<release> package meta
// depends on.
func versionedKernelPackage(ctx context.Context, meta string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", meta).Output()
	if err != nil {
		return "", fmt.Errorf("resolving kernel package %q: apt-cache depends: %w", meta, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if dep, ok := strings.CutPrefix(line, "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSpace(dep), nil
		}
	}
	return "", fmt.Errorf("resolving kernel package %q: no linux-image-* dependency in %q", meta, out)
}
