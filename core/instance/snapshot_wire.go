package instance

import "github.com/guestlink/guestlink/api"

// WireSnapshot converts a snapshot to its wire form.
func WireSnapshot(s *Snapshot) api.InstanceSnapshot {
	cfg, devs := s.Config, s.Devices
	if cfg == nil {
		cfg = map[string]string{}
	}
	if devs == nil {
		devs = map[string]map[string]string{}
	}
	return api.InstanceSnapshot{Name: s.Name, CreatedAt: s.CreatedAt, Stateful: s.Stateful, Running: s.Running,
		Ready: s.Ready, Backend: s.Backend, Config: cfg, Devices: devs, Size: s.DiskBytes, StateSize: s.StateBytes,
		Details: s.Details, Consistency: s.Consistency, ConsistencyDetail: s.ConsistencyDetail}
}

// WireSnapshots converts a list of snapshots (never nil).
func WireSnapshots(list []*Snapshot) []api.InstanceSnapshot {
	out := make([]api.InstanceSnapshot, len(list))
	for i, s := range list {
		out[i] = WireSnapshot(s)
	}
	return out
}
