package pluginhost_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// requiresRoot skips a test that must chown files to another user.
func requiresRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test gives a file to another user (uid 65534) with chown")
	}
}

// TestUntrustedPluginDirRefused: the plugin host refuses to start when the
// plugin directory, SHA256SUMS or a plugin binary could be replaced by
// another user, and says what to fix; a good directory is accepted.
func TestUntrustedPluginDirRefused(t *testing.T) {
	tests := []struct {
		name     string
		root     bool                           // needs root (chown)
		spoil    func(t *testing.T, dir string) // makes dir untrusted
		wantPath string                         // relative to dir, "." for dir
		wantText string
	}{
		{"good directory", false, func(*testing.T, string) {}, "", ""},
		{"world-writable plugin dir", false, func(t *testing.T, dir string) { chmod(t, dir, 0o777) }, ".", "writable by group and others"},
		{"world-writable sticky plugin dir", false, func(t *testing.T, dir string) { chmod(t, dir, os.ModeSticky|0o777) }, ".", "writable by group and others"},
		{"group-writable SHA256SUMS", false, func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, pluginhost.SumsFile), 0o664)
		}, pluginhost.SumsFile, "writable by its group"},
		{"other-writable plugin binary", false, func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "sim"), 0o757)
		}, "sim", "writable by others"},
		{"plugin binary owned by another user", true, func(t *testing.T, dir string) {
			chown(t, filepath.Join(dir, "sim"), 65534)
		}, "sim", "owned by uid 65534"},
		{"SHA256SUMS owned by another user", true, func(t *testing.T, dir string) {
			chown(t, filepath.Join(dir, pluginhost.SumsFile), 65534)
		}, pluginhost.SumsFile, "owned by uid 65534"},
		{"plugin dir owned by another user", true, func(t *testing.T, dir string) { chown(t, dir, 65534) }, ".", "owned by uid 65534"},
		{"symlink to an untrusted binary", false, func(t *testing.T, dir string) {
			other := t.TempDir()
			chmod(t, other, 0o777)
			copyFile(t, filepath.Join(dir, "sim"), filepath.Join(other, "sim"))
			os.Remove(filepath.Join(dir, "sim"))
			if err := os.Symlink(filepath.Join(other, "sim"), filepath.Join(dir, "sim")); err != nil {
				t.Fatal(err)
			}
		}, "sim", "writable by group and others"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				requiresRoot(t)
			}
			dir, bdir := pluginDir(t, map[string]map[string]any{"sim": nil})
			tt.spoil(t, dir)
			h := pluginhost.New(testConfig(dir, bdir))
			defer h.Close()
			err := h.Start(ctxT(t))
			if tt.wantText == "" {
				if err != nil {
					t.Fatalf("Start on a good directory: %v", err)
				}
				if st := status(h, "sim"); st.Health != pluginhost.HealthHealthy {
					t.Fatalf("status = %+v", st)
				}
				return
			}
			if !errors.Is(err, pluginhost.ErrUntrusted) {
				t.Fatalf("Start = %v, want ErrUntrusted", err)
			}
			path := filepath.Join(dir, tt.wantPath)
			if tt.wantPath == "." {
				path = dir
			}
			for _, want := range []string{tt.wantText, path} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
			if !strings.Contains(err.Error(), "fix: chmod go-w") && !strings.Contains(err.Error(), "fix: chown") {
				t.Fatalf("error %q does not say how to fix it", err)
			}
			if len(h.List()) != 0 {
				t.Fatalf("plugins were started from an untrusted directory: %+v", h.List())
			}
		})
	}
}

// TestCheckTrusted covers the directories above the checked path: a sticky
// world-writable parent (like /tmp) is fine, a plain one is not.
func TestCheckTrusted(t *testing.T) {
	tests := []struct {
		name    string
		parent  os.FileMode
		self    os.FileMode
		wantErr string
	}{
		{"private", 0o700, 0o700, ""},
		{"readable by all", 0o755, 0o755, ""},
		{"sticky world-writable parent", os.ModeSticky | 0o777, 0o755, ""},
		{"world-writable parent", 0o777, 0o755, "above it"},
		{"group-writable self", 0o755, 0o775, "writable by its group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "parent")
			self := filepath.Join(parent, "self")
			if err := os.MkdirAll(self, 0o700); err != nil {
				t.Fatal(err)
			}
			chmod(t, self, tt.self)
			chmod(t, parent, tt.parent)
			err := pluginhost.CheckTrusted("test directory", self)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckTrusted: %v", err)
				}
				return
			}
			if !errors.Is(err, pluginhost.ErrUntrusted) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckTrusted = %v, want ErrUntrusted with %q", err, tt.wantErr)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Chown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's cleanup removes it whoever owns it (we are root).
}
