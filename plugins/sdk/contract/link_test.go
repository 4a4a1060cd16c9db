package contract_test

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestCheckLinkEndpoint(t *testing.T) {
	info := &contract.Info{Capabilities: []contract.Capability{contract.CapLinkHybrid, contract.CapLinkVsock}}
	tests := []struct {
		name string
		ep   *contract.LinkEndpoint
		ok   bool
	}{
		{"hybrid", &contract.LinkEndpoint{Kind: contract.LinkHybrid, Path: "/run/g/vsock"}, true},
		{"vsock", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 3}, true},
		{"none", nil, false},
		{"unknown kind", &contract.LinkEndpoint{Kind: "pigeon", Path: "/x"}, false},
		{"not announced", &contract.LinkEndpoint{Kind: contract.LinkSerial, Path: "/x"}, false},
		{"reserved cid", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 2}, false},
		{"any cid", &contract.LinkEndpoint{Kind: contract.LinkVsock, CID: 0xffffffff}, false},
		{"no path", &contract.LinkEndpoint{Kind: contract.LinkHybrid}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := contract.CheckLinkEndpoint(info, tc.ep)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, contract.ErrInvalid)) {
				t.Fatalf("CheckLinkEndpoint = %v, want ok=%v (or ErrInvalid)", err, tc.ok)
			}
		})
	}
	if !info.HasLink() || (&contract.Info{Capabilities: []contract.Capability{contract.CapRecover}}).HasLink() {
		t.Fatal("HasLink disagrees with the capabilities")
	}
}
