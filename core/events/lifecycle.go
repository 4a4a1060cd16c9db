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
	md := Lifecycle{Action: action, Source: InstanceSource(instanceName), Context: ctx, Requestor: by}
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
	var l Lifecycle
	if e.Type != TypeLifecycle {
		return l, fmt.Errorf("decoding event %d: type %q is not %q", e.ID, e.Type, TypeLifecycle)
	}
	if err := json.Unmarshal(e.Metadata, &l); err != nil {
		return l, fmt.Errorf("decoding event %d lifecycle metadata: %w", e.ID, err)
	}
	return l, nil
}
