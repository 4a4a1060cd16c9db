package devlxdapi

// Values of Info.Auth.
const (
	AuthUntrusted = "untrusted"
	AuthTrusted   = "trusted"
)

// TrustedInfo is the body of GET /1.0 for a caller that authenticated with
// a devlxd bearer token: Info with Auth "trusted" and the environment.
type TrustedInfo struct {
	Info
	// Environment is read-only information about the host.
	Environment Environment `json:"environment"`
}

// MarshalJSON encodes the info's fields and the environment in one object.
func (t TrustedInfo) MarshalJSON() ([]byte, error) {
	type plain Info
	p := plain(t.Info)
	if p.SupportedStorageDrivers == nil {
		p.SupportedStorageDrivers = []StorageDriver{}
	}
	b, err := encode(struct {
		plain
		Environment Environment `json:"environment"`
	}{p, t.Environment})
	if err != nil {
		return nil, err
	}
	return trimNewline(b), nil
}

// Environment is the environment object of TrustedInfo.
type Environment struct {
	// ServerClustered is always false: a guestlink daemon is one host.
	ServerClustered bool `json:"server_clustered"`
}

// Instance is the body of GET /1.0/instances/{name} on the trusted devlxd
// API: the instance's name and the devices the caller's identity owns.
type Instance struct {
	Name    string                       `json:"name"`
	Devices map[string]map[string]string `json:"devices"`
}

// InstancePut is the body of PATCH /1.0/instances/{name} on the trusted
// devlxd API: the devices the caller's identity wants (an entry whose
// value is null removes that device).
type InstancePut struct {
	Devices map[string]map[string]string `json:"devices"`
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return b
}
