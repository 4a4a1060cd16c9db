package features_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/agent/features"
)

// TestCheck writes switch files into a guest root and checks which features
// Check lets through, and that a refusal names the switch.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    *string // nil: no file
		enabled []string
		why     string // in the error of a refused feature
	}{
		{name: "no file", enabled: features.Names},
		{name: "empty file", file: ptr(""), enabled: features.Names},
		{name: "files off", file: ptr("features:\n  files: false\n"), enabled: []string{"exec", "state", "freeze"}, why: "features.files: false in /etc/guestlink-agent.yaml"},
		{name: "exec off, files on", file: ptr("features:\n  exec: false\n  files: true\n"), enabled: []string{"files", "state", "freeze"}, why: "features.exec: false"},
		{name: "all off", file: ptr("---\nfeatures:  # the guest admin's choice\n  exec: false\n  files: false\n\tstate: false\n  freeze: false\n"), why: "switched off in the guest"},
		{name: "not a boolean", file: ptr("features:\n  exec: no\n"), why: `want true or false, not "no"`},
		{name: "feature outside features", file: ptr("  exec: false\n"), why: "outside features"},
		{name: "unknown feature", file: ptr("features:\n  ssh: false\n"), why: `unknown feature "ssh"`},
		{name: "features: inline", file: ptr("features: {exec: false}\n"), why: "parsing /etc/guestlink-agent.yaml"},
		{name: "unknown key", file: ptr("feature:\n  exec: false\n"), why: "parsing /etc/guestlink-agent.yaml"},
		{name: "not yaml", file: ptr("features: [\n"), why: "parsing /etc/guestlink-agent.yaml"},
		{name: "too large", file: ptr(strings.Repeat("#", features.MaxFileSize+1)), why: "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != nil {
				if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, "etc", "guestlink-agent.yaml"), []byte(*tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sw := features.New(root)
			if got := sw.Enabled(); !slices.Equal(got, tc.enabled) {
				t.Errorf("Enabled() = %v, want %v", got, tc.enabled)
			}
			for _, n := range features.Names {
				err := sw.Check(n)
				if slices.Contains(tc.enabled, n) {
					if err != nil {
						t.Errorf("Check(%q) = %v, want nil", n, err)
					}
					continue
				}
				if !errors.Is(err, features.ErrDisabled) || !strings.Contains(err.Error(), tc.why) {
					t.Errorf("Check(%q) = %v, want ErrDisabled saying %q", n, err, tc.why)
				}
				if strings.Contains(err.Error(), root) {
					t.Errorf("Check(%q) = %v: names the host path of the root", n, err)
				}
			}
		})
	}
}

// TestCheckRereads switches a feature off and on again with the same
// Switch: the file is read at every Check, no restart needed.
func TestCheckRereads(t *testing.T) {
	root := t.TempDir()
	sw := features.New(root)
	if err := sw.Check(features.Files); err != nil {
		t.Fatalf("no file: %v", err)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	path := filepath.Join(root, "etc", "guestlink-agent.yaml")
	if err := os.WriteFile(path, []byte("features:\n  files: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sw.Check(features.Files); !errors.Is(err, features.ErrDisabled) {
		t.Fatalf("switched off: Check = %v", err)
	}
	if err := os.WriteFile(path, []byte("features:\n  files: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sw.Check(features.Files); err != nil {
		t.Fatalf("switched on again: %v", err)
	}
	if err := sw.Check("ssh"); !errors.Is(err, features.ErrDisabled) {
		t.Fatalf("unknown feature: Check = %v", err)
	}
}

func ptr(s string) *string { return &s }
