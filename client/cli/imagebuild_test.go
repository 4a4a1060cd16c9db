package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client/cli"
	"github.com/guestlink/guestlink/internal/testbin"
)

// TestImageBuildChecksTools runs the real CLI binary from a source tree of
// its own (bin/guestlink, the real scripts/guest-image-debian.sh, and a
// Makefile whose target only leaves a mark) with a PATH lacking mmdebstrap:
// "image build debian-12" refuses naming the program, its Debian package
// and make deps, and runs no make. With a stand-in mmdebstrap in that PATH
// the check passes and make runs; "image build debian-13" runs its own
// target (the same script, asked --check too).
func TestImageBuildChecksTools(t *testing.T) {
	tree := t.TempDir()
	exe := filepath.Join(tree, "bin", "guestlink")
	if err := testbin.Install(testbin.CLI, exe); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "guest-image-debian.sh"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(tree, "scripts", "guest-image-debian.sh"), string(script), 0o755)
	made, made13 := filepath.Join(tree, "made"), filepath.Join(tree, "made-13")
	mustWrite(t, filepath.Join(tree, "Makefile"), "guest-image-debian:\n\ttouch "+made+"\nguest-image-debian-13:\n\ttouch "+made13+"\n", 0o644)

	// A PATH with every program of the test's but mmdebstrap.
	path := t.TempDir()
	seen := map[string]bool{"mmdebstrap": true}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				if err := os.Symlink(filepath.Join(d, e.Name()), filepath.Join(path, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	build := func(image ...string) (string, error) {
		name := "debian-12"
		if len(image) > 0 {
			name = image[0]
		}
		cmd := exec.Command(exe, "--state-dir", t.TempDir(), "image", "build", name)
		cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), cli.EnvConfigDir + "=" + t.TempDir()}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		return stderr.String(), err
	}

	stderr, err := build()
	want := "Error: building debian-12: guest-image-debian: cannot build the image: mmdebstrap not found in PATH (Debian package mmdebstrap); " +
		"install: sudo apt-get install mmdebstrap, or make deps (installs everything the VM path needs)\n"
	if err == nil || stderr != want {
		t.Fatalf("image build without mmdebstrap: %v, stderr\n %q, want\n %q", err, stderr, want)
	}
	if _, err := os.Stat(made); err == nil {
		t.Fatal("make ran although the build's check failed")
	}

	mustWrite(t, filepath.Join(path, "mmdebstrap"), "#!/bin/sh\nexit 0\n", 0o755)
	stderr, _ = build() // the import that follows fails: no daemon runs
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("with mmdebstrap in PATH make did not run; stderr:\n%s", stderr)
	}
	if strings.Contains(stderr, "mmdebstrap") {
		t.Fatalf("with mmdebstrap in PATH the CLI still names it:\n%s", stderr)
	}
	if _, err := os.Stat(made13); err == nil {
		t.Fatal("image build debian-12 ran debian-13's target")
	}
	stderr, _ = build("debian-13")
	if _, err := os.Stat(made13); err != nil {
		t.Fatalf("image build debian-13 did not run make guest-image-debian-13; stderr:\n%s", stderr)
	}
}

func mustWrite(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}
