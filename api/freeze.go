package api

// FreezePost asks the agent to freeze the guest's filesystems (POST
// /1.0/freeze on the agent's link port). The agent thaws them by itself
// after Timeout seconds whatever happens to the daemon or the link.
type FreezePost struct {
	// Timeout is how long the filesystems may stay frozen, in seconds
	// (0: the agent's default, 60; at most 600).
	Timeout int `json:"timeout,omitempty"`
}

// FreezeSkip is a mounted filesystem the agent did not freeze, and why.
type FreezeSkip struct {
	Dir    string `json:"dir"`
	Reason string `json:"reason"`
}

// FreezeState answers the agent's POST /1.0/freeze and POST /1.0/thaw.
type FreezeState struct {
	// Frozen lists the mount points frozen, in the order they were frozen
	// ("/" last); empty in a thaw's answer.
	Frozen []string `json:"frozen"`
	// Thawed lists the mount points thawed, in the order they were thawed
	// ("/" first); empty in a freeze's answer.
	Thawed []string `json:"thawed"`
	// Skipped are the device-backed filesystems left alone (read-only,
	// network, already frozen, not freezable).
	Skipped []FreezeSkip `json:"skipped,omitempty"`
	// Timeout is the freeze's timeout in seconds (freeze answers).
	Timeout int `json:"timeout,omitempty"`
	// Expired reports, in a thaw's answer, that the freeze had already
	// ended by its timeout before the thaw: the filesystems were not
	// frozen all along.
	Expired bool `json:"expired"`
}
