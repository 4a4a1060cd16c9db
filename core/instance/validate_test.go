package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
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
	// An older plugin: prefixes, no schema (it checks its own keys).
	sim := backendKeys{"sim", &contract.Info{ConfigPrefixes: []string{"sim."}}}
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
			err := validateKey(tt.key, tt.value, tt.unset, sim)
			if (err == nil) != tt.ok {
				t.Fatalf("validateKey(%q, %q) = %v, want ok=%v", tt.key, tt.value, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

// TestValidateKeySchema checks keys under a backend's prefix against the
// schema it declares: a declared key passes, another is ErrInvalid naming
// the key, the backend and its keys; unsetting an undeclared key passes (a
// key an older plugin version knew); keys outside the prefix are the
// daemon's as before.
func TestValidateKeySchema(t *testing.T) {
	b := backendKeys{"sim", &contract.Info{ConfigPrefixes: []string{"sim."},
		ConfigSchema: []contract.ConfigKey{{Name: "sim.command"}, {Name: "sim.ring_size"}}}}
	tests := []struct {
		key, value string
		unset      bool
		want       string // "" means accepted, else a part of the error
	}{
		{"sim.command", "sleep 1", false, ""},
		{"sim.ring_size", "16", false, ""},
		{"sim.bogus", "1", false, `unknown configuration key "sim.bogus": backend "sim" has no such key (its keys: sim.command, sim.ring_size)`},
		{"sim.Command", "x", false, `"sim.Command"`},
		{"sim.bogus", "", true, ""},
		{"sim.", "x", false, `"sim."`},
		{"qemu.cpus", "1", false, `unknown configuration key "qemu.cpus"`},
		{"user.sim.bogus", "1", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			err := validateKey(tt.key, tt.value, tt.unset, b)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validateKey(%q, %q, unset=%v) = %v, want it accepted", tt.key, tt.value, tt.unset, err)
			case tt.want != "" && err == nil:
				t.Fatalf("validateKey(%q, %q, unset=%v) accepted it, want an error with %q", tt.key, tt.value, tt.unset, tt.want)
			case tt.want != "" && (!strings.Contains(err.Error(), tt.want) || !errors.Is(err, errdefs.ErrInvalid)):
				t.Fatalf("validateKey(%q, %q) = %v, want ErrInvalid containing %q", tt.key, tt.value, err, tt.want)
			}
		})
	}
}
