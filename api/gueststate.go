package api

import (
	"sort"
	"time"
)

// GuestState is what a guest's agent reports of its guest: GET /1.0/state
// on the agent's link port answers it, and the admin API's GET
// /1.0/instances/{name}/state carries it as "guest". The fields follow
// LXD's InstanceState where it has them (network, memory, disk,
// processes), plus the guest's OS facts.
type GuestState struct {
	// Network maps interface names to their state.
	Network map[string]GuestNetwork `json:"network"`
	// Memory is the guest's memory use.
	Memory GuestMemory `json:"memory"`
	// Disk maps "root" to the use of the guest's root file system.
	Disk map[string]GuestDisk `json:"disk"`
	// Processes is how many processes run in the guest.
	Processes int64 `json:"processes"`
	// OS and OSVersion are NAME and VERSION of the guest's
	// /etc/os-release ("" without one).
	OS        string `json:"os"`
	OSVersion string `json:"os_version"`
	// Hostname is the guest's host name, Kernel its kernel release.
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	// OOMKills is the guest kernel's oom_kill counter (/proc/vmstat): the
	// processes it killed for want of memory this boot. A guestlink
	// extension; absent for a simulated guest (its /proc is its host's).
	OOMKills uint64 `json:"oom_kills,omitempty"`
}

// GuestNetwork is one interface of a guest (LXD's InstanceStateNetwork).
type GuestNetwork struct {
	Addresses []GuestAddress `json:"addresses"`
	Hwaddr    string         `json:"hwaddr"`
	MTU       int            `json:"mtu"`
	State     string         `json:"state"` // "up" or "down"
	Type      string         `json:"type"`  // "loopback" or "broadcast"
}

// GuestAddress is one address of an interface (LXD's
// InstanceStateNetworkAddress).
type GuestAddress struct {
	Family  string `json:"family"` // "inet" or "inet6"
	Address string `json:"address"`
	Netmask string `json:"netmask"` // the prefix length, "24"
	Scope   string `json:"scope"`   // "global", "link" or "local"
}

// GuestMemory is a guest's memory use in bytes (LXD's
// InstanceStateMemory).
type GuestMemory struct {
	Usage int64 `json:"usage"`
	Total int64 `json:"total"`
}

// GuestDisk is a file system's use in bytes (LXD's InstanceStateDisk).
type GuestDisk struct {
	Usage int64 `json:"usage"`
	Total int64 `json:"total"`
}

// GuestInfo is what the daemon knows of a guest through its agent, in the
// admin API's instance state: the agent's features, the guest's state as
// last fetched and when, and why it is missing or old.
type GuestInfo struct {
	// Features are the agent features the guest's admin leaves on
	// (exec, files, state, freeze).
	Features []string `json:"features"`
	// State is the guest's state; nil when never fetched or "state" is
	// switched off in the guest.
	State *GuestState `json:"state,omitempty"`
	// UpdatedAt is when State was fetched.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// Error says why the last fetch failed (State is then the one
	// before, if any); "" when it worked.
	Error string `json:"error,omitempty"`
}

// IPv4 returns the first global IPv4 address of the guest's interfaces
// in name order ("" without one): the address a list shows.
func (s *GuestState) IPv4() string {
	if s == nil {
		return ""
	}
	names := make([]string, 0, len(s.Network))
	for name := range s.Network {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, a := range s.Network[name].Addresses {
			if a.Family == "inet" && a.Scope == "global" {
				return a.Address
			}
		}
	}
	return ""
}
