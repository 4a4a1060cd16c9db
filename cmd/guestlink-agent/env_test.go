package main

import (
	"flag"
	"io"
	"testing"
	"time"
)

// mapEnv is an environment made of a map.
func mapEnv(m map[string]string) environment {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestRunFlagsEnvironment loads the settings of "run" and the client
// commands' --socket from an environment holding the new names, the old
// (deprecated) names, both (the new one must win), an empty new value (the
// old one is used), and the daemon's and CLI's GUESTLINK_CONFIG_DIR and
// GUESTLINK_STATE_DIR (never read by the agent).
func TestRunFlagsEnvironment(t *testing.T) {
	defaults := runOptions{root: "/", configDir: "/run/guestlink-agent", stateDir: "/run/guestlink-agent/state",
		link: "vsock", heartbeat: 5 * time.Second}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   runOptions
		socket string
	}{
		{"nothing set", nil, defaults, "/dev/lxd/sock"},
		{"new names", map[string]string{
			"GUESTLINK_AGENT_ROOT": "/g", "GUESTLINK_AGENT_CONFIG_DIR": "/cfg", "GUESTLINK_AGENT_STATE_DIR": "/st",
			"GUESTLINK_AGENT_LINK": "hybrid:/l.sock", "GUESTLINK_AGENT_HEARTBEAT": "2s", "GUESTLINK_AGENT_TLS_PER_REQUEST": "true",
			"GUESTLINK_AGENT_BOOT_ID": "b1", "GUESTLINK_AGENT_DEBUG": "1", "GUESTLINK_AGENT_DEVLXD_SOCKET": "/s.sock",
		}, runOptions{root: "/g", configDir: "/cfg", stateDir: "/st", link: "hybrid:/l.sock", heartbeat: 2 * time.Second,
			perRequest: true, bootID: "b1", debug: true}, "/s.sock"},
		{"old names", map[string]string{
			"GUESTLINK_ROOT": "/old", "GUESTLINK_LINK": "serial:p", "GUESTLINK_HEARTBEAT": "3s", "GUESTLINK_TLS_PER_REQUEST": "1",
			"GUESTLINK_BOOT_ID": "b0", "GUESTLINK_DEBUG": "true", "GUESTLINK_DEVLXD_SOCKET": "/old.sock",
		}, runOptions{root: "/old", configDir: defaults.configDir, stateDir: defaults.stateDir, link: "serial:p",
			heartbeat: 3 * time.Second, perRequest: true, bootID: "b0", debug: true}, "/old.sock"},
		{"both: the new name wins", map[string]string{
			"GUESTLINK_ROOT": "/old", "GUESTLINK_AGENT_ROOT": "/new", "GUESTLINK_LINK": "serial:p", "GUESTLINK_AGENT_LINK": "vsock",
			"GUESTLINK_HEARTBEAT": "3s", "GUESTLINK_AGENT_HEARTBEAT": "7s", "GUESTLINK_BOOT_ID": "b0", "GUESTLINK_AGENT_BOOT_ID": "b2",
			"GUESTLINK_DEBUG": "true", "GUESTLINK_AGENT_DEBUG": "false",
			"GUESTLINK_DEVLXD_SOCKET": "/old.sock", "GUESTLINK_AGENT_DEVLXD_SOCKET": "/new.sock",
		}, runOptions{root: "/new", configDir: defaults.configDir, stateDir: defaults.stateDir, link: "vsock",
			heartbeat: 7 * time.Second, bootID: "b2"}, "/new.sock"},
		{"an empty new name falls back to the old", map[string]string{"GUESTLINK_AGENT_ROOT": "", "GUESTLINK_ROOT": "/old"},
			runOptions{root: "/old", configDir: defaults.configDir, stateDir: defaults.stateDir, link: "vsock", heartbeat: defaults.heartbeat},
			"/old/dev/lxd/sock"},
		{"the CLI's and daemon's variables are not the agent's", map[string]string{
			"GUESTLINK_CONFIG_DIR": "/home/u/.config/guestlink", "GUESTLINK_STATE_DIR": "/var/lib/guestlink",
		}, defaults, "/dev/lxd/sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mapEnv(tc.env)
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			got := runFlags(fs, e)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if *got != tc.want {
				t.Errorf("run settings = %+v, want %+v", *got, tc.want)
			}
			cs := flag.NewFlagSet("ready", flag.ContinueOnError)
			if sock := socketFlag(cs, e); *sock != tc.socket {
				t.Errorf("--socket defaults to %q, want %q", *sock, tc.socket)
			}
		})
	}
}

// TestRunFlagsOverEnvironment checks a flag still beats its variable.
func TestRunFlagsOverEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	got := runFlags(fs, mapEnv(map[string]string{"GUESTLINK_AGENT_CONFIG_DIR": "/env"}))
	if err := fs.Parse([]string{"--config-dir", "/flag"}); err != nil {
		t.Fatal(err)
	}
	if got.configDir != "/flag" {
		t.Errorf("--config-dir /flag over the environment's /env gave %q", got.configDir)
	}
}
