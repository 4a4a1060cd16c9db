package api

// DevicesPost is the body of POST /1.0/instances/{name}/devices: a device
// to add (its config includes "type").
type DevicesPost struct {
	Name   string            `json:"name"`
	Device map[string]string `json:"device"`
}

// DevicePatch is the body of PATCH /1.0/instances/{name}/devices/{device}:
// keys to set and keys to unset.
type DevicePatch struct {
	Config map[string]string `json:"config,omitempty"`
	Unset  []string          `json:"unset,omitempty"`
}
