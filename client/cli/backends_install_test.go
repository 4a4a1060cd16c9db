package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

func TestBackendsInstallReload(t *testing.T) {
	srv := apitest.NewServer(t, apitest.Options{})
	bin := filepath.Join(t.TempDir(), "vbox")
	tests := []struct {
		name    string
		args    []string
		want    string // stdout, or the error for a failure
		wantErr bool
	}{
		{"install", []string{"backends", "install", bin}, "Backend vbox installed: healthy, version 0.2.0, pid 5151\n", false},
		{"install named", []string{"backends", "install", bin, "--name", "vbox2"}, "Backend vbox2 installed: healthy, version 0.2.0, pid 5151\n", false},
		{"bad name", []string{"backends", "install", bin, "--name", ".hidden"}, `invalid backend name ".hidden": must be a plain file name, not hidden, not SHA256SUMS: invalid argument`, true},
		{"reload", []string{"backends", "reload", "sim"}, "Backend sim reloaded: healthy, version 0.1.0, pid 4242\n", false},
		{"reload tampered", []string{"backends", "reload", "tampered"}, `reloading backend "tampered": SHA256SUMS says sha256 ` + strings.Repeat("a", 64) + ` for "tampered", the file has sha256 ` + strings.Repeat("b", 64) + ": plugin checksum rejected: conflict", true},
		{"reload no name", []string{"backends", "reload"}, "guestlink backends reload takes 1 argument(s), got 0 (usage: guestlink backends reload NAME [flags])", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantErr {
				fails(t, srv, tt.want, tt.args...)
				return
			}
			if out := ok(t, srv, tt.args...); out != tt.want {
				t.Fatalf("stdout %q, want %q", out, tt.want)
			}
		})
	}
	if out := ok(t, srv, "backends"); !strings.Contains(out, "vbox2  healthy") {
		t.Fatalf("backends after the install:\n%s", out)
	}
}
