package instance

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
)

// TestBadConfigKeysAndValues is the attack of a client setting keys and
// values the guest path cannot carry or that confuse what reads them:
// every one is refused, by Create and by UpdateConfig, with a message that
// names the key, and nothing changes.
func TestBadConfigKeysAndValues(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", map[string]string{"user.a": "1"})
	tests := []struct {
		name    string
		key     string
		value   string
		message string
	}{
		{"NUL in key", "user.a\x00b", "1", `invalid configuration key "user.a\x00b": byte 0x00 at position 6 is not a printable ASCII character`},
		{"newline in key", "user.a\nb", "1", `invalid configuration key "user.a\nb": byte 0x0a at position 6`},
		{"invalid UTF-8 in key", "user.\xff", "1", `invalid configuration key "user.\xff": byte 0xff at position 5`},
		{"non-ASCII key", "user.é", "1", `invalid configuration key "user.é": byte 0xc3 at position 5`},
		{"space in key", "user.a b", "1", `invalid configuration key "user.a b": character ' ' at position 6 is not a letter, digit, '.', '-', '_' or '/'`},
		{"equals in key", "user.a=b", "1", `character '=' at position 6`},
		{"leading dot", ".user.a", "1", `invalid configuration key ".user.a": must not start with a dot`},
		{"trailing dot", "user.a.", "1", `invalid configuration key "user.a.": must not end with a dot`},
		{"empty segment", "user..a", "1", `invalid configuration key "user..a": empty segment at position 5`},
		{"key too long", "user." + strings.Repeat("k", MaxKeyLength), "1", fmt.Sprintf("longer than %d bytes", MaxKeyLength)},
		{"NUL in value", "user.b", "a\x00b", `invalid value for "user.b": contains a NUL byte at position 1`},
		{"invalid UTF-8 in value", "user.b", "ok\xc3(", `invalid value for "user.b": not valid UTF-8 (byte 0xc3 at position 2)`},
		{"value too long", "user.b", strings.Repeat("v", MaxValueLength+1), fmt.Sprintf(`invalid value for "user.b": %d bytes long, at most %d allowed`, MaxValueLength+1, MaxValueLength)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("create", func(t *testing.T) {
				_, err := e.m.Create(bg, CreateRequest{Name: "bad", Config: map[string]string{tt.key: tt.value}}, adminCaller)
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.message) {
					t.Fatalf("Create: %v, want ErrInvalid saying %q", err, tt.message)
				}
			})
			t.Run("update", func(t *testing.T) {
				_, err := e.m.UpdateConfig(bg, "web1", map[string]string{tt.key: tt.value}, nil, adminCaller)
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.message) {
					t.Fatalf("UpdateConfig: %v, want ErrInvalid saying %q", err, tt.message)
				}
				if got := e.get("web1").Config; !cmp.Equal(got, inst.Config) {
					t.Errorf("config changed: %v", got)
				}
			})
		})
	}
	if _, err := e.m.Get(bg, "bad"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an instance was created from a bad config: %v", err)
	}
}

// TestGoodConfigKeysAndValues checks what the grammar accepts: LXD's key
// characters and values with newlines, tabs and any valid UTF-8, up to
// MaxValueLength bytes.
func TestGoodConfigKeysAndValues(t *testing.T) {
	e := newEnv(t)
	cfg := map[string]string{
		"user.a-b_c/d.e9":      "1",
		"user.multi":           "line 1\nline 2\ttab",
		"user.unicode":         "héllo wörld ✓",
		"cloud-init.user-data": "#cloud-config\npackages: [nginx]\n",
		"user." + strings.Repeat("k", MaxKeyLength-5): "at the key limit",
		"user.big": strings.Repeat("<", MaxValueLength),
	}
	inst := e.create("web1", cfg)
	for k, v := range cfg {
		if inst.Config[k] != v {
			t.Errorf("config %q = %.20q, want %.20q", k, inst.Config[k], v)
		}
	}
}

// TestConfigTooLargeOrTooMany is the attack of one client growing a
// config without bound or sending 50k keys at once: too many keys in one
// request, too many keys or bytes in all (reached over several requests)
// are refused, and nothing changes.
func TestConfigTooLargeOrTooMany(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	keys := func(n int, prefix string, value string) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("user.%s%d", prefix, i)] = value
		}
		return m
	}
	t.Run("50k keys in one request", func(t *testing.T) {
		before := len(e.actions("web1"))
		_, err := e.m.UpdateConfig(bg, "web1", keys(50_000, "k", "v"), nil, adminCaller)
		want := fmt.Sprintf("too many configuration keys in one request (50000, at most %d)", MaxKeysPerChange)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("UpdateConfig: %v, want ErrInvalid saying %q", err, want)
		}
		if _, err := e.m.Create(bg, CreateRequest{Name: "web2", Config: keys(MaxKeysPerChange+1, "k", "v")}, adminCaller); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("Create: %v, want ErrInvalid", err)
		}
		if n := len(e.actions("web1")); n != before {
			t.Errorf("%d events for a refused request", n-before)
		}
	})
	t.Run("too many keys in all", func(t *testing.T) {
		var err error
		for i := 0; err == nil && i < 10; i++ {
			_, err = e.m.UpdateConfig(bg, "web1", keys(MaxKeysPerChange, fmt.Sprintf("r%d-", i), "v"), nil, adminCaller)
		}
		want := fmt.Sprintf("at most %d per instance", MaxConfigKeys)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("UpdateConfig: %v, want ErrInvalid saying %q", err, want)
		}
		if n := len(e.get("web1").Config); n > MaxConfigKeys {
			t.Errorf("%d keys stored, at most %d allowed", n, MaxConfigKeys)
		}
	})
	t.Run("too many bytes in all", func(t *testing.T) {
		e.create("web3", nil)
		big := strings.Repeat("x", MaxValueLength)
		var err error
		for i := 0; err == nil && i < 10; i++ {
			_, err = e.m.UpdateConfig(bg, "web3", map[string]string{fmt.Sprintf("user.big%d", i): big}, nil, adminCaller)
		}
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "configuration too large") ||
			!strings.Contains(err.Error(), fmt.Sprintf("at most %d per instance", MaxConfigSize)) {
			t.Fatalf("UpdateConfig: %v, want ErrInvalid saying the config is too large", err)
		}
		size := 0
		for k, v := range e.get("web3").Config {
			size += len(k) + len(v)
		}
		if size > MaxConfigSize {
			t.Errorf("%d bytes stored, at most %d allowed", size, MaxConfigSize)
		}
	})
}

// TestBigConfigChangeIsOneEvent checks that the largest change allowed on
// a running instance is one instance-updated event and one ConfigChanged
// call, not one per key.
func TestBigConfigChangeIsOneEvent(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for i := range MaxKeysPerChange {
		set[fmt.Sprintf("user.k%d", i)] = "v"
	}
	before := len(e.actions("web1"))
	hooksBefore := len(e.hooks.chg)
	if _, err := e.m.UpdateConfig(bg, "web1", set, nil, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.actions("web1")[before:]; !cmp.Equal(got, []string{events.InstanceUpdated}) {
		t.Errorf("events %v, want one %s", got, events.InstanceUpdated)
	}
	if n := len(e.hooks.chg) - hooksBefore; n != 1 || len(e.hooks.chg[hooksBefore]) != MaxKeysPerChange {
		t.Errorf("%d ConfigChanged calls, want one with %d changes", n, MaxKeysPerChange)
	}
}
