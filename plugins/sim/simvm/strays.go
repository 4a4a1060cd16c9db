package simvm

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// KillStrays kills what is left of an earlier boot of the guest at p whose
// VMM died without powering it off (a killed VMM takes the guest command
// with it, but not the command's children): every process of this user
// whose environment holds GUESTLINK_ROOT=<p.Root()>. It returns how many
// processes it signalled. Processes that cleared their environment escape
// it.
func KillStrays(p Paths) int {
	want := []byte(EnvRoot + "=" + p.Root())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // gone, or not ours
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
				break
			}
		}
	}
	return n
}
