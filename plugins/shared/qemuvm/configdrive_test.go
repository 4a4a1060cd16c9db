package qemuvm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// TestConfigDrive builds a guest's config drive and reads it back with
// isoinfo: its label, its files with their content; bad names are refused
// and the staging directory does not stay.
func TestConfigDrive(t *testing.T) {
	for _, c := range []string{isoBinary, "isoinfo"} {
		if _, err := exec.LookPath(c); err != nil {
			testenv.Requires(t, c, "scripts/install-deps.sh installs genisoimage")
		}
	}
	dir := t.TempDir()
	files := []sdk.File{{Path: "agent.crt", Mode: 0o644, Data: []byte("CERT")}, {Path: "agent.key", Mode: 0o600, Data: []byte("KEY")}}
	if err := writeConfigDrive(context.Background(), dir, files); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, configDrive)
	out, err := exec.Command("isoinfo", "-d", "-i", iso).Output()
	if err != nil || !strings.Contains(string(out), "Volume id: "+ConfigDriveLabel) {
		t.Fatalf("isoinfo -d: %v\n%s", err, out)
	}
	for _, f := range files {
		got, err := exec.Command("isoinfo", "-R", "-i", iso, "-x", "/"+f.Path).Output()
		if err != nil || string(got) != string(f.Data) {
			t.Errorf("%s on the drive = %q, %v", f.Path, got, err)
		}
	}
	if fi, err := os.Stat(iso); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("drive mode %v, %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, configDriveDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the staging directory stayed: %v", err)
	}
	if args := strings.Join(configDriveArgs(dir), " "); !strings.Contains(args, "read-only=on") || !strings.Contains(args, "filename="+iso) {
		t.Errorf("drive arguments %q", args)
	}
	for _, bad := range []string{"../x", "a/b", ""} {
		if err := writeConfigDrive(context.Background(), dir, []sdk.File{{Path: bad, Data: []byte("x")}}); !errors.Is(err, sdk.ErrInvalid) {
			t.Errorf("file %q: %v", bad, err)
		}
	}
}
