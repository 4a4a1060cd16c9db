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
