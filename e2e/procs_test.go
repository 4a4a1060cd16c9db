package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// proc is a process found in /proc.
type proc struct {
	pid     int
	cmdline string
}

// procsUnder returns the processes (other than this one) whose command line
// or environment mentions dir: the daemon, its plugins, VMMs and agents.
func procsUnder(dir string) []proc {
	return findProcs(func(cmdline, environ string) bool {
		return strings.Contains(cmdline, dir) || strings.Contains(environ, dir)
	})
}

// findProcs returns the processes (other than this one) for which match
// reports true on their NUL-separated command line and environment.
func findProcs(match func(cmdline, environ string) bool) []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 { // gone, or a zombie
			continue
		}
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if match(string(cmdline), string(environ)) {
			out = append(out, proc{pid: pid, cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")})
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// vmmPID returns the pid of the sim VMM of the guest directory dir.
func vmmPID(t *testing.T, dir string) int {
	t.Helper()
	ps := findProcs(func(cmdline, _ string) bool {
		return strings.HasSuffix(cmdline, "\x00vmm\x00"+dir+"\x00")
	})
	if len(ps) != 1 {
		t.Fatalf("want one VMM process for %s, found %v", dir, ps)
	}
	return ps[0].pid
}

// agentPIDs returns the guestlink-agent processes of a guest's root.
func agentPIDs(root string) []int {
	var pids []int
	for _, p := range findProcs(func(cmdline, environ string) bool {
		exe := strings.SplitN(cmdline, "\x00", 2)[0]
		return filepath.Base(exe) == "guestlink-agent" && strings.Contains("\x00"+environ, "\x00GUESTLINK_ROOT="+root+"\x00")
	}) {
		pids = append(pids, p.pid)
	}
	return pids
}
