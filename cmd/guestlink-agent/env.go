package main

import (
	"os"
	"strconv"
	"time"
)

// Environment variables guestlink-agent reads, each the default of the flag
// of the same name. They all carry the GUESTLINK_AGENT_ prefix so that no
// variable of the daemon or the CLI (GUESTLINK_CONFIG_DIR, GUESTLINK_STATE_DIR)
// is read by the agent as its own (docs/environment.md).
const (
	EnvRoot          = "GUESTLINK_AGENT_ROOT"
	EnvConfigDir     = "GUESTLINK_AGENT_CONFIG_DIR"
	EnvStateDir      = "GUESTLINK_AGENT_STATE_DIR"
	EnvLink          = "GUESTLINK_AGENT_LINK"
	EnvHeartbeat     = "GUESTLINK_AGENT_HEARTBEAT"
	EnvTLSPerRequest = "GUESTLINK_AGENT_TLS_PER_REQUEST"
	EnvBootID        = "GUESTLINK_AGENT_BOOT_ID"
	EnvDebug         = "GUESTLINK_AGENT_DEBUG"
	EnvDevlxdSocket  = "GUESTLINK_AGENT_DEVLXD_SOCKET"
)

// deprecatedEnv maps a variable to the name it had before the prefix, still
// read when the new one is unset or empty. GUESTLINK_CONFIG_DIR and
// GUESTLINK_STATE_DIR have no entry: they are the CLI's and the daemon's,
// and a daemon's environment reaching a guest made its agent look for its
// certificates in the CLI's directory.
var deprecatedEnv = map[string]string{
	EnvRoot:          "GUESTLINK_ROOT",
	EnvLink:          "GUESTLINK_LINK",
	EnvHeartbeat:     "GUESTLINK_HEARTBEAT",
	EnvTLSPerRequest: "GUESTLINK_TLS_PER_REQUEST",
	EnvBootID:        "GUESTLINK_BOOT_ID",
	EnvDebug:         "GUESTLINK_DEBUG",
	EnvDevlxdSocket:  "GUESTLINK_DEVLXD_SOCKET",
}

// environment looks variables up; os.LookupEnv outside tests.
type environment func(name string) (string, bool)

// get returns the value of name, else of its deprecated alias, else def;
// an empty value counts as unset.
func (e environment) get(name, def string) string {
	if v, ok := e(name); ok && v != "" {
		return v
	}
	if old, ok := deprecatedEnv[name]; ok {
		if v, ok := e(old); ok && v != "" {
			return v
		}
	}
	return def
}

// duration is get parsed as a duration; an unparsable value gives def.
func (e environment) duration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(e.get(name, "")); err == nil {
		return d
	}
	return def
}

// boolean is get parsed as a bool; unset or unparsable is false.
func (e environment) boolean(name string) bool {
	b, _ := strconv.ParseBool(e.get(name, ""))
	return b
}

// osEnv is the process's environment.
var osEnv environment = os.LookupEnv
