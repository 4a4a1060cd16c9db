package secretfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/internal/secretfile"
)

const secret = "postgres://guestlink:s3cret-pw@db.example/guestlink"

// TestRead tries the file forms Read takes and the ones it refuses; a
// refusal names the file and never shows the secret.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		fifo    bool
		want    string // the value; "" when refused
		refusal string // in the error
	}{
		{name: "0600 with a newline", content: secret + "\n", mode: 0o600, want: secret},
		{name: "0400 with spaces", content: "  " + secret + " \r\n", mode: 0o400, want: secret},
		{name: "group readable", content: secret, mode: 0o640, refusal: "mode 0640"},
		{name: "world readable", content: secret, mode: 0o604, refusal: "mode 0604"},
		{name: "group writable", content: secret, mode: 0o620, refusal: "mode 0620"},
		{name: "empty", content: " \n", mode: 0o600, refusal: "empty"},
		{name: "two lines", content: secret + "\nmore\n", mode: 0o600, refusal: "more than one line"},
		{name: "too large", content: strings.Repeat("x", secretfile.MaxSize+1), mode: 0o600, refusal: "larger than"},
		{name: "fifo", fifo: true, mode: 0o600, refusal: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secret")
			if tc.fifo {
				if err := syscall.Mkfifo(path, uint32(tc.mode)); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			got, err := secretfile.Read(path)
			if tc.refusal == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Read = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Read = %q; want a refusal saying %q", got, tc.refusal)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.refusal) || !strings.Contains(msg, path) || strings.Contains(msg, "s3cret") {
				t.Errorf("refusal %q: want it to say %q and name %s, without the secret", msg, tc.refusal, path)
			}
		})
	}
	if _, err := secretfile.Read(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Read of a missing file succeeded")
	}
}
