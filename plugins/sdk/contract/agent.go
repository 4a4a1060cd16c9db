package contract

import (
	"os"
	"path/filepath"
)

// What a guest's agent needs from its backend (docs/plugins.md, "What the
// agent needs"). A guest reaches Ready only through guestlink-agent: the
// agent writes STARTED and CONNECTED to the guest's ring port, which the
// backend relays to ReadRing; the daemon reaches the agent's link port
// through the guest's link (LinkEndpoint) and the agent reaches the daemon
// through it; the guest declares Ready on the agent's /dev/lxd/sock.

// AgentEnv names the environment variable that gives a plugin the
// guestlink-agent binary to run in guests that are host processes (the sim,
// the fleet, the example): set by whoever starts the plugin to override
// the default of AgentPath (the conformance kit sets it to
// Config.Agent). VM backends boot guests whose image carries the agent.
const AgentEnv = "GUESTLINK_PLUGIN_AGENT"

// AgentFile is the agent binary's file name.
const AgentFile = "guestlink-agent"

// Files of the agent in a guest's config drive, as the daemon sends them in
// GuestSpec.Files at every Start: the backend must put them in the
// directory the agent reads, its --config-dir (/run/guestlink-agent in the
// guest by default, under the guest's root for a process guest), with
// their modes.
const (
	AgentFileCert       = "agent.crt"  // the agent's certificate, served on its link port
	AgentFileKey        = "agent.key"  // its key, mode 0600
	AgentFileServerCert = "server.crt" // the daemon's client certificate, the only one the agent accepts
	AgentFileConf       = "agent.conf" // the daemon's advertisement: where the agent reaches it (JSON)
)

// AgentPath returns the guestlink-agent binary a plugin runs in guests that
// are host processes: $GUESTLINK_PLUGIN_AGENT (AgentEnv) when set, else
// guestlink-agent in the parent directory of the plugin's own directory,
// the layout make build writes (bin/plugins/sim -> bin/guestlink-agent).
// exe is the plugin's binary (os.Executable, symbolic links resolved).
func AgentPath(exe string) string {
	if p := os.Getenv(AgentEnv); p != "" {
		return p
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), AgentFile)
}
