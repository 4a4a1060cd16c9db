package gueststate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/agent/gueststate"
)

// TestParseOSRelease reads the NAME and VERSION of os-release files as
// distributions write them (quoted, unquoted, escaped, commented).
func TestParseOSRelease(t *testing.T) {
	for _, tc := range []struct {
		name, data, wantName, wantVersion string
	}{
		{"debian 12", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\n", "Debian GNU/Linux", "12 (bookworm)"},
		{"unquoted", "NAME=Alpine\nVERSION_ID=3.20\n", "Alpine", ""},
		{"single quotes and escapes", "NAME='My OS'\nVERSION=\"1 \\\"beta\\\"\"\n", "My OS", `1 "beta"`},
		{"comments and blanks", "# NAME=wrong\n\n  NAME=Right\n", "Right", ""},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, v := gueststate.ParseOSRelease([]byte(tc.data))
			if n != tc.wantName || v != tc.wantVersion {
				t.Errorf("ParseOSRelease = %q, %q; want %q, %q", n, v, tc.wantName, tc.wantVersion)
			}
		})
	}
}

// TestCollect reads a guest root's os-release and this machine's
// interfaces (the loopback at least), memory and processes.
func TestCollect(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("NAME=\"Test OS\"\nVERSION=\"7\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := (&gueststate.Collector{Root: root}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if st.OS != "Test OS" || st.OSVersion != "7" {
		t.Errorf("os: %q %q", st.OS, st.OSVersion)
	}
	lo, ok := st.Network["lo"]
	if !ok || lo.Type != "loopback" || len(lo.Addresses) == 0 || lo.Addresses[0].Scope != "local" {
		t.Errorf("lo: %+v", lo)
	}
	if st.Memory.Total <= 0 || st.Memory.Usage <= 0 || st.Memory.Usage > st.Memory.Total {
		t.Errorf("memory: %+v", st.Memory)
	}
	if st.Processes < 1 || st.Kernel == "" || st.Hostname == "" || st.Disk["root"].Total <= 0 {
		t.Errorf("processes %d kernel %q hostname %q disk %+v", st.Processes, st.Kernel, st.Hostname, st.Disk)
	}
	// An os-release symlink out of the root is not followed.
	os.Remove(filepath.Join(root, "etc", "os-release"))
	outside := filepath.Join(t.TempDir(), "os-release")
	os.WriteFile(outside, []byte("NAME=Host\n"), 0o644)
	if err := os.Symlink(outside, filepath.Join(root, "etc", "os-release")); err != nil {
		t.Fatal(err)
	}
	st, err = (&gueststate.Collector{Root: root}).Collect()
	if err != nil || st.OS != "" {
		t.Errorf("os-release through a symlink out of the root: %q, %v", st.OS, err)
	}
}
