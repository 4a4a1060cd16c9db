package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
)

// TestMemberWireCompatible checks the instance view's wire between members
// of different versions. The fixtures are what a member sent before
// core/instance lost its JSON tags (encoding/json of the view itself,
// captured from that code): this binary decodes them into the same views
// (an old member answering a new one), and its own answer for those views
// is byte for byte the fixture (a new member answering an old one, which
// decodes the old shape).
func TestMemberWireCompatible(t *testing.T) {
	want := memberWireInstances()
	for _, tc := range []struct {
		name    string
		fixture string
		decode  func(*bytes.Reader) (any, error)
		views   any
		answer  any
	}{
		{
			name: "list", fixture: "testdata/member-instances-v1.json",
			decode: func(r *bytes.Reader) (any, error) { return decodeInstances(r) },
			views:  want, answer: MemberInstances(want, nil),
		},
		{
			name: "one instance", fixture: "testdata/member-instance-v1.json",
			decode: func(r *bytes.Reader) (any, error) { return decodeInstance(r) },
			views:  want[0], answer: MemberInstance(want[0], nil),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, err := os.ReadFile(tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			old = bytes.TrimSpace(old)
			got, err := tc.decode(bytes.NewReader(old))
			if err != nil {
				t.Fatalf("decoding the old member's answer: %v", err)
			}
			if !reflect.DeepEqual(got, tc.views) {
				t.Errorf("the old member's answer decodes to\n%#v\nwant\n%#v", got, tc.views)
			}
			// fiber's c.JSON is encoding/json's Marshal.
			enc, err := json.Marshal(tc.answer)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, old) {
				t.Errorf("this member's answer differs from the old shape:\n got %s\nwant %s", enc, old)
			}
		})
	}
	t.Run("no instances", func(t *testing.T) {
		// The old member answered [] (never null) for none.
		if enc, _ := json.Marshal(MemberInstances(nil, nil)); string(enc) != "[]" {
			t.Errorf("an empty answer encodes as %s, want []", enc)
		}
		got, err := decodeInstances(bytes.NewReader([]byte("[]")))
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("decoding []: %#v, %v", got, err)
		}
	})
	t.Run("damaged answer", func(t *testing.T) {
		if _, err := decodeInstances(bytes.NewReader([]byte(`[{"name":`))); err == nil {
			t.Error("a truncated answer decodes without an error")
		}
		if _, err := decodeInstance(bytes.NewReader([]byte(`{"status_code":"x"}`))); err == nil {
			t.Error("a status code of the wrong type decodes without an error")
		}
	})
}

// memberWireInstances are the instances of the fixture
// testdata/member-instances-v1.json: one with every field set, one as a
// stopped guest has it, one zero (nil maps and slices).
func memberWireInstances() []*instance.Instance {
	t1 := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	t2 := time.Date(1999, 1, 2, 3, 4, 5, 0, time.UTC)
	return []*instance.Instance{
		{
			Name: "web1", UUID: "0b7c7d0e-1f2e-4d3c-8b4a-0123456789ab", Backend: "sim", Status: "Ready", StatusCode: 113,
			Config:  map[string]string{"volatile.last_state.ready": "true", "user.x": "<&>\"é"},
			Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/"}, "eth0": {"type": "nic"}},
			Boot:    3, CreatedAt: t1, StartedAt: &t2, ReadyAt: &t1, Link: "vsock",
			Agent:        instance.AgentInfo{State: instance.AgentConnected, LastHeartbeat: &t1, Since: &t2},
			DevlxdSocket: "/run/x/sock", Details: map[string]string{"pid": "42"},
			Conditions: []instance.Condition{
				{Type: instance.CondAgentConnected, Status: instance.CondTrue, Reason: "Connected", Message: "m", LastTransitionTime: t1},
				{Type: instance.CondReady, Status: instance.CondFalse, Reason: "NotDeclared", LastTransitionTime: t2},
			},
			Location: "b", StatusReason: "", Profiles: []string{"default", "web"},
		},
		{
			Name: "db1", UUID: "u-2", Backend: "qemu", Status: "Stopped", StatusCode: 102,
			Config: map[string]string{}, Devices: map[string]map[string]string{}, CreatedAt: t2,
			Agent: instance.AgentInfo{State: instance.AgentNone}, Conditions: []instance.Condition{},
			Location: "b", StatusReason: "member b is offline (last heartbeat 2026-11-22T01:02:03Z)", Profiles: []string{},
		},
		{},
	}
}

// TestRequestorHeaderMatchesOldJSON checks that the requestor a member
// forwards (HeaderRequestor) is the base64 of the same JSON as when members
// encoded events.Requestor itself (core/events/testdata/wire-events-v1.json,
// captured before it lost its JSON tags), that it reads back, and that a
// value that is not one is refused.
// TestMemberInstancesCarryIPv4: the owner's answer carries each guest's
// address from its agent cache (api.Instance.IPv4), the member that asked
// reads it into the view (GuestIPv4) for its list, and a guest without a
// known address sends no ipv4 key (so an answer without addresses is still
// the old shape, TestMemberWireCompatible). Before, members sent no address
// and a remote instance's IPV4 column was empty.
func TestMemberInstancesCarryIPv4(t *testing.T) {
	list := memberWireInstances()
	addrs := map[string]string{list[0].UUID: "10.1.2.3"}
	lookup := func(uuid string) string { return addrs[uuid] }
	enc, err := json.Marshal(MemberInstances(list, lookup))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(enc, []byte(`"ipv4":"10.1.2.3"`)); n != 1 {
		t.Fatalf("the answer has %d ipv4 keys for one known address: %s", n, enc)
	}
	got, err := decodeInstances(bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	for i, inst := range got {
		if want := addrs[inst.UUID]; inst.GuestIPv4 != want {
			t.Errorf("instance %d (%s): GuestIPv4 = %q, want %q", i, inst.Name, inst.GuestIPv4, want)
		}
	}
	one, err := json.Marshal(MemberInstance(list[0], lookup))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := decodeInstance(bytes.NewReader(one))
	if err != nil || inst.GuestIPv4 != "10.1.2.3" {
		t.Fatalf("one instance: GuestIPv4 = %q (%v), want 10.1.2.3", inst.GuestIPv4, err)
	}
}

func TestRequestorHeaderMatchesOldJSON(t *testing.T) {
	raw, err := os.ReadFile("../events/testdata/wire-events-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fixture); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		by   events.Requestor
	}{
		{"lifecycle with requestor", events.Requestor{Username: "alice", Protocol: "tls", Address: "10.0.0.5:41234", UID: "1000",
			Fingerprint: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
		{"lifecycle short requestor", events.Requestor{Username: "bearer/ci", Protocol: "bearer", Address: "127.0.0.1:5"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var want bytes.Buffer
			if err := json.Compact(&want, fixture[tt.name]["requestor"]); err != nil {
				t.Fatalf("fixture %q: %v", tt.name, err)
			}
			h := RequestorHeader(tt.by)
			if got, _ := base64.StdEncoding.DecodeString(h); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("header JSON differs from the old one:\n got %s\nwant %s", got, want.Bytes())
			}
			if back, ok := ParseRequestorHeader(base64.StdEncoding.EncodeToString(want.Bytes())); !ok || back != tt.by {
				t.Errorf("the old header reads back as %+v, %v; want %+v", back, ok, tt.by)
			}
		})
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("[1,2]")), base64.StdEncoding.EncodeToString([]byte("{"))} {
		if by, ok := ParseRequestorHeader(bad); ok {
			t.Errorf("ParseRequestorHeader(%q) = %+v, true; want refused", bad, by)
		}
	}
}
