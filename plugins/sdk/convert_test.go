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
