package cluster

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// The member-to-member wire of the instance view (InstancesPath): a member
// answers with its instances as api.Instance objects, the admin API's own
// wire type (without the timeline), and the member that asked turns them
// back into core/instance views. core/instance's types carry no wire
// format; the JSON is field for field what members sent when they encoded
// the view itself (testdata/member-instances-v1.json), so a member on an
// older binary and one on this one read each other.

// MemberInstances returns a member's answer to InstancesPath: its
// instances in wire form, an empty list (never null) for none. ipv4, when
// set, gives each guest's address by UUID (the member's agent cache), sent
// as api.Instance.IPv4 so that the member that asked lists it
// (instance.Instance.GuestIPv4); a member on an older binary ignores it.
func MemberInstances(list []*instance.Instance, ipv4 func(uuid string) string) []api.Instance {
	out := make([]api.Instance, len(list))
	for i, inst := range list {
		out[i] = MemberInstance(inst, ipv4)
	}
	return out
}

// MemberInstance returns a member's answer to InstancesPath/{name}, with
// the guest's address from ipv4 as MemberInstances.
func MemberInstance(inst *instance.Instance, ipv4 func(uuid string) string) api.Instance {
	w := instance.WireInstance(inst, nil)
	if ipv4 != nil {
		w.IPv4 = ipv4(inst.UUID)
	}
	return w
}

// decodeInstances reads a member's answer to InstancesPath.
func decodeInstances(r io.Reader) ([]*instance.Instance, error) {
	var wire []api.Instance
	if err := json.NewDecoder(r).Decode(&wire); err != nil {
		return nil, fmt.Errorf("decoding a member's instances: %w", err)
	}
	out := make([]*instance.Instance, len(wire))
	for i := range wire {
		out[i] = instance.InstanceFromWire(&wire[i])
	}
	return out, nil
}

// decodeInstance reads a member's answer to InstancesPath/{name}.
func decodeInstance(r io.Reader) (*instance.Instance, error) {
	var wire api.Instance
	if err := json.NewDecoder(r).Decode(&wire); err != nil {
		return nil, fmt.Errorf("decoding a member's instance: %w", err)
	}
	return instance.InstanceFromWire(&wire), nil
}

// RequestorHeader returns the value of HeaderRequestor for by: the base64 of
// its JSON as api.EventRequestor, byte for byte what members sent when they
// encoded events.Requestor itself (core/events/testdata/wire-events-v1.json).
func RequestorHeader(by events.Requestor) string {
	raw, _ := json.Marshal(api.EventRequestor{Username: by.Username, Protocol: by.Protocol, Address: by.Address, UID: by.UID, Fingerprint: by.Fingerprint})
	return base64.StdEncoding.EncodeToString(raw) // strings only: cannot fail
}

// ParseRequestorHeader reads a HeaderRequestor value; ok is false when it
// is not base64 of a requestor's JSON.
func ParseRequestorHeader(h string) (by events.Requestor, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		return by, false
	}
	var w api.EventRequestor
	if json.Unmarshal(raw, &w) != nil {
		return by, false
	}
	return events.Requestor{Username: w.Username, Protocol: w.Protocol, Address: w.Address, UID: w.UID, Fingerprint: w.Fingerprint}, true
}
