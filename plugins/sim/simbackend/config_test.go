package simbackend

import (
	"errors"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]string
		want    guestConfig
		errWith []string // substrings of the error; nil means success
	}{
		{"defaults", nil, guestConfig{Command: DefaultCommand, Layout: simvm.LayoutCurrent, RingSize: 16}, nil},
		{"other prefixes ignored", map[string]string{"user.x": "1", "volatile.uuid": "u", "qemu.foo": "bar"},
			guestConfig{Command: DefaultCommand, Layout: simvm.LayoutCurrent, RingSize: 16}, nil},
		{"all keys", map[string]string{KeyCommand: "exec sleep 1", KeyLayout: "legacy", KeyRingSize: "4096", KeyAgent: "/x/guestlink-agent"},
			guestConfig{Command: "exec sleep 1", Layout: simvm.LayoutLegacy, RingSize: 4096, Agent: "/x/guestlink-agent"}, nil},
		{"empty values mean default", map[string]string{KeyCommand: " ", KeyLayout: "", KeyRingSize: ""},
			guestConfig{Command: DefaultCommand, Layout: simvm.LayoutCurrent, RingSize: 16}, nil},
		{"unknown key", map[string]string{"sim.ringsize": "16"}, guestConfig{}, []string{`"sim.ringsize"`, "sim.ring_size", "sim.command", "sim.layout", "sim.agent"}},
		{"ring not power of two", map[string]string{KeyRingSize: "24"}, guestConfig{}, []string{KeyRingSize, "24", "power of two"}},
		{"ring zero", map[string]string{KeyRingSize: "0"}, guestConfig{}, []string{KeyRingSize, "power of two"}},
		{"ring negative", map[string]string{KeyRingSize: "-16"}, guestConfig{}, []string{KeyRingSize}},
		{"ring not a number", map[string]string{KeyRingSize: "16k"}, guestConfig{}, []string{KeyRingSize, `"16k"`}},
		{"unknown layout", map[string]string{KeyLayout: "modern"}, guestConfig{}, []string{KeyLayout, `"modern"`, "current", "legacy"}},
		{"relative agent", map[string]string{KeyAgent: "bin/agent"}, guestConfig{}, []string{KeyAgent, "absolute"}},
		{"serial link", map[string]string{KeyLink: "serial"}, guestConfig{Command: DefaultCommand, Layout: simvm.LayoutCurrent, RingSize: 16, Link: simvm.LinkSerial}, nil},
		{"hybrid link", map[string]string{KeyLink: "hybrid"}, guestConfig{Command: DefaultCommand, Layout: simvm.LayoutCurrent, RingSize: 16}, nil},
		{"unknown link", map[string]string{KeyLink: "vsock"}, guestConfig{}, []string{KeyLink, `"vsock"`, "hybrid", "serial"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig(tc.cfg)
			if tc.errWith == nil {
				if err != nil {
					t.Fatalf("parseConfig: %v", err)
				}
				if *got != tc.want {
					t.Fatalf("parseConfig = %+v, want %+v", *got, tc.want)
				}
				return
			}
			if !errors.Is(err, sdk.ErrInvalid) {
				t.Fatalf("parseConfig error = %v, want ErrInvalid", err)
			}
			for _, s := range tc.errWith {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestDecodeHandle(t *testing.T) {
	tests := []struct {
		name string
		raw  string
	}{
		{"empty", ""},
		{"not json", "\x00\xff garbage"},
		{"json array", "[1,2]"},
		{"wrong version", `{"v":2,"id":"g-1","dir":"/tmp/g-1"}`},
		{"no id", `{"v":1,"dir":"/tmp/g-1"}`},
		{"bad id", `{"v":1,"id":"../etc","dir":"/tmp/../etc"}`},
		{"relative dir", `{"v":1,"id":"g-1","dir":"tmp/g-1"}`},
		{"dir not matching id", `{"v":1,"id":"g-1","dir":"/etc"}`},
		{"unclean dir", `{"v":1,"id":"g-1","dir":"/tmp//g-1"}`},
		{"negative pid", `{"v":1,"id":"g-1","dir":"/tmp/g-1","vmm_pid":-1}`},
		{"wrong types", `{"v":"1","id":3}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeHandle(sdk.Handle(tc.raw)); !errors.Is(err, sdk.ErrInvalid) {
				t.Fatalf("decodeHandle(%q) = %v, want ErrInvalid", tc.raw, err)
			}
		})
	}
	h := &handle{V: 1, ID: "web1-0a1b2c3d", Dir: "/tmp/guests/web1-0a1b2c3d", UUID: "u", VMMPID: 42}
	got, err := decodeHandle(h.encode())
	if err != nil || *got != *h {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
}

func TestNewID(t *testing.T) {
	tests := []struct{ name, prefix string }{
		{"web1", "web1-"},
		{"Web_One.example", "webone"},
		{"", "guest-"},
		{"---", "guest-"},
		{strings.Repeat("a", 80), strings.Repeat("a", 20) + "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := newID(tc.name)
			if err != nil || !strings.HasPrefix(id, tc.prefix) || !idPattern.MatchString(id) {
				t.Fatalf("newID(%q) = %q, %v", tc.name, id, err)
			}
		})
	}
}
