package sdk_test

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

func TestCheckLinkEndpoint(t *testing.T) {
	info := &sdk.Info{Capabilities: []sdk.Capability{sdk.CapLinkHybrid, sdk.CapLinkVsock}}
	tests := []struct {
		name string
		ep   *sdk.LinkEndpoint
		ok   bool
	}{
		{"hybrid", &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: "/run/g/vsock"}, true},
		{"vsock", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 3}, true},
		{"none", nil, false},
		{"unknown kind", &sdk.LinkEndpoint{Kind: "pigeon", Path: "/x"}, false},
		{"not announced", &sdk.LinkEndpoint{Kind: sdk.LinkSerial, Path: "/x"}, false},
		{"reserved cid", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 2}, false},
		{"any cid", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 0xffffffff}, false},
		{"no path", &sdk.LinkEndpoint{Kind: sdk.LinkHybrid}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sdk.CheckLinkEndpoint(info, tc.ep)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, sdk.ErrInvalid)) {
				t.Fatalf("CheckLinkEndpoint = %v, want ok=%v (or ErrInvalid)", err, tc.ok)
			}
		})
	}
	if !info.HasLink() || (&sdk.Info{Capabilities: []sdk.Capability{sdk.CapRecover}}).HasLink() {
		t.Fatal("HasLink disagrees with the capabilities")
	}
}
