package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
)

// FuzzValidateName checks that every accepted name is a DNS label and that
// a rejection is always ErrInvalid.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"web1", "a", "-a", "a-", "1a", "a_b", "é", strings.Repeat("a", 64), "a--b", "A1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("ValidateName(%q) = %v, not ErrInvalid", name, err)
			}
			return
		}
		if len(name) < 1 || len(name) > 63 || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || name[0] >= '0' && name[0] <= '9' {
			t.Fatalf("ValidateName accepted %q", name)
		}
		for _, r := range name {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				t.Fatalf("ValidateName accepted %q with %q", name, r)
			}
		}
	})
}

func TestValidateKeyTable(t *testing.T) {
	prefixes := []string{"sim."}
	tests := []struct {
		key, value string
		unset      bool
		ok         bool
	}{
		{"user.a", "x", false, true},
		{"cloud-init.user-data", "#cloud-config", false, true},
		{"cloud-init.", "x", false, false},
		{"sim.command", "/bin/sh", false, true},
		{"sim.", "x", false, false},
		{"qemu.cpu", "host", false, false},
		{"security.devlxd", "TRUE", false, true},
		{"security.devlxd", "", true, true},
		{"security.devlxd", "", false, false},
		{"limits.cpu", "4", false, true},
		{"limits.cpu", "-1", false, false},
		{"limits.cpu", "1,3-5", false, true},
		{"limits.memory", "2GiB", false, true},
		{"limits.memory", "0", false, false},
		{"limits.memory", "99999999999999999999999", false, false},
		{"volatile.vsock_id", "4294967295", false, true},
		{"volatile.vsock_id", "4294967296", false, false},
		{"volatile.cloud-init.instance-id", "", false, false},
		{"volatile.last_state.ready", "", true, false},
		{"volatile.last_state.power", "RUNNING", false, false},
		{"", "x", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			err := validateKey(tt.key, tt.value, tt.unset, prefixes)
			if (err == nil) != tt.ok {
				t.Fatalf("validateKey(%q, %q) = %v, want ok=%v", tt.key, tt.value, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}
