package sdk

import (
	"reflect"
	"testing"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

func TestInfoRoundTrip(t *testing.T) {
	for _, in := range []*Info{
		{Name: "sim", Version: "1", Capabilities: []Capability{CapRecover}, ConfigPrefixes: []string{"sim."}, InstanceType: InstanceTypeContainer},
		{Name: "qemu", Version: "2", ConfigPrefixes: []string{"qemu."}, InstanceType: InstanceTypeVM},
		{Name: "qemu-unusable", Version: "3", Missing: []Missing{
			{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"},
			{What: "firmware bios-256k.bin", Reason: "not in QEMU's firmware search path"},
		}},
		{Name: "schema", Version: "4", ConfigPrefixes: []string{"schema."}, ConfigSchema: []ConfigKey{
			{Name: "schema.size", Type: ConfigInt, Default: "16", Doc: "ring bytes"},
			{Name: "schema.path", Type: ConfigPath},
		}},
		{Name: "old", Version: "0"},
	} {
		t.Run(in.Name, func(t *testing.T) {
			if got := infoFromProto(infoToProto(in)); !reflect.DeepEqual(got, in) {
				t.Fatalf("round trip of %+v = %+v", in, got)
			}
		})
	}
}

// TestGuestInstanceType checks the default an older plugin gets: a plugin
// that declares no instance type (field 110 absent) is a virtual machine.
func TestGuestInstanceType(t *testing.T) {
	for _, tt := range []struct {
		info *Info
		want string
	}{
		{nil, InstanceTypeVM},
		{infoFromProto(&backendv1.InfoResponse{Name: "old"}), InstanceTypeVM},
		{&Info{InstanceType: InstanceTypeContainer}, InstanceTypeContainer},
		{&Info{InstanceType: InstanceTypeVM}, InstanceTypeVM},
		{&Info{InstanceType: "zone"}, InstanceTypeVM},
	} {
		if got := tt.info.GuestInstanceType(); got != tt.want {
			t.Errorf("GuestInstanceType(%+v) = %q, want %q", tt.info, got, tt.want)
		}
	}
}

// TestMissingText checks the sentence the daemon shows for an unusable
// backend: every missing thing with its package, then one install command
// naming each package once.
func TestMissingText(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []Missing
		want string
	}{
		{"none", nil, ""},
		{"one program", []Missing{{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"}},
			"qemu-img not found in PATH (Debian package qemu-utils); install: apt-get install qemu-utils"},
		{"package named once", []Missing{
			{What: "firmware linuxboot_dma.bin", Reason: "not found", Package: "qemu-system-data"},
			{What: "firmware kvmvapic.bin", Reason: "not found", Package: "qemu-system-data"},
			{What: "genisoimage", Reason: "not found in PATH", Package: "genisoimage"},
		}, "firmware linuxboot_dma.bin not found (Debian package qemu-system-data); firmware kvmvapic.bin not found (Debian package qemu-system-data); " +
			"genisoimage not found in PATH (Debian package genisoimage); install: apt-get install qemu-system-data genisoimage"},
		{"no package", []Missing{{What: "default kernel", Reason: "no such file"}}, "default kernel no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := MissingText(tt.in); got != tt.want {
				t.Errorf("MissingText(%+v) =\n %q, want\n %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestInfoConfigKeys checks the schema lookups the daemon and the kit use:
// a key is owned when it has something after an owned prefix, and declared
// when the schema names it.
func TestInfoConfigKeys(t *testing.T) {
	info := &Info{ConfigPrefixes: []string{"sim."}, ConfigSchema: []ConfigKey{{Name: "sim.command"}, {Name: "sim.layout"}}}
	for _, tt := range []struct {
		key            string
		owned, declare bool
	}{
		{"sim.command", true, true},
		{"sim.bogus", true, false},
		{"sim.", false, false},
		{"qemu.cpus", false, false},
		{"simx.command", false, false},
	} {
		if got := info.OwnsConfigKey(tt.key); got != tt.owned {
			t.Errorf("OwnsConfigKey(%q) = %v, want %v", tt.key, got, tt.owned)
		}
		if _, got := info.ConfigKey(tt.key); got != tt.declare {
			t.Errorf("ConfigKey(%q) found = %v, want %v", tt.key, got, tt.declare)
		}
	}
	if got := info.ConfigKeyNames(); !reflect.DeepEqual(got, []string{"sim.command", "sim.layout"}) {
		t.Errorf("ConfigKeyNames = %q", got)
	}
}
