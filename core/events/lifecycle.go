package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Defaults of a lifecycle event's envelope (LXD's, for a single host).
const (
	DefaultProject  = "default"
	DefaultLocation = "none"
)

// InstanceSource returns the source of an instance's lifecycle events,
// "/1.0/instances/<name>".
func InstanceSource(name string) string { return "/1.0/instances/" + name }

// NewLifecycle returns a lifecycle event (not yet published) for an
// instance: source /1.0/instances/<name>, project "default", location
// "none", timestamp now in UTC with nanoseconds. A nil ctx is sent as {}; a
// ctx that cannot be encoded as JSON is replaced by {"error": "..."}.
func NewLifecycle(action, instanceName string, ctx map[string]any, by *Requestor) Event {
	if ctx == nil {
		ctx = map[string]any{}
	}
	md := storedLifecycle{Action: action, Source: InstanceSource(instanceName), Context: ctx, Requestor: storedRequestorOf(by)}
	raw, err := json.Marshal(md)
	if err != nil {
		md.Context = map[string]any{"error": fmt.Sprintf("encoding event context: %v", err)}
		raw, _ = json.Marshal(md) // only strings left: cannot fail
	}
	return Event{
		Type:      TypeLifecycle,
		Timestamp: time.Now().UTC(),
		Project:   DefaultProject,
		Location:  DefaultLocation,
		Instance:  instanceName,
		Metadata:  raw,
	}
}

// Lifecycle decodes the metadata of a lifecycle event.
func (e Event) Lifecycle() (Lifecycle, error) {
	if e.Type != TypeLifecycle {
		return Lifecycle{}, fmt.Errorf("decoding event %d: type %q is not %q", e.ID, e.Type, TypeLifecycle)
	}
	l, err := DecodeLifecycle(e.Metadata)
	if err != nil {
		return l, fmt.Errorf("decoding event %d lifecycle metadata: %w", e.ID, err)
	}
	return l, nil
}

// DecodeLifecycle decodes lifecycle metadata whatever the event's type
// says (the dashboard reads what it can of any event).
func DecodeLifecycle(raw json.RawMessage) (Lifecycle, error) {
	var s storedLifecycle
	err := json.Unmarshal(raw, &s)
	return Lifecycle{Action: s.Action, Source: s.Source, Context: s.Context, Requestor: s.Requestor.requestor()}, err
}

// storedLifecycle is a lifecycle event's metadata as the event log keeps
// it and LXD sends it (api.EventLifecycle reads the same JSON); its bytes
// must not change (testdata/wire-events-v1.json).
type storedLifecycle struct {
	Action    string           `json:"action"`
	Source    string           `json:"source"`
	Context   map[string]any   `json:"context"`
	Requestor *storedRequestor `json:"requestor,omitempty"`
}

// storedRequestor is a Requestor in stored lifecycle metadata.
type storedRequestor struct {
	Username    string `json:"username"`
	Protocol    string `json:"protocol"`
	Address     string `json:"address"`
	UID         string `json:"uid,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

func storedRequestorOf(r *Requestor) *storedRequestor {
	if r == nil {
		return nil
	}
	return &storedRequestor{Username: r.Username, Protocol: r.Protocol, Address: r.Address, UID: r.UID, Fingerprint: r.Fingerprint}
}

func (s *storedRequestor) requestor() *Requestor {
	if s == nil {
		return nil
	}
	return &Requestor{Username: s.Username, Protocol: s.Protocol, Address: s.Address, UID: s.UID, Fingerprint: s.Fingerprint}
}
