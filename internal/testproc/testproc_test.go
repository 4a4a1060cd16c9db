package testproc

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStartKillsGrandchildren checks that the cleanup Start registers ends
// the grandchildren too: a shell's `sleep` that would otherwise outlive it.
func TestStartKillsGrandchildren(t *testing.T) {
	var pidfd int
	t.Run("start", func(t *testing.T) {
		cmd := exec.Command("/bin/sh", "-c", "sleep 120 & echo $!; wait")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		Start(t, cmd)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("reading the sleep pid: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != cmd.Process.Pid {
			t.Fatalf("sleep %d: pgid %d (%v), want the shell's %d", pid, pgid, err, cmd.Process.Pid)
		}
		// A pidfd becomes readable when the process exits, even for a
		// process that is not our child.
		if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
			t.Fatalf("pidfd_open %d: %v", pid, err)
		}
	})
	defer unix.Close(pidfd)
	// The subtest's cleanup has sent SIGKILL to the group: the sleep exits.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 30_000)
	if err != nil || n != 1 {
		t.Fatalf("the shell's sleep survived the group kill: poll = %d, %v", n, err)
	}
}

// TestKillGroupUnstarted checks that KillGroup on a command that never
// started reports false and does not signal anything.
func TestKillGroupUnstarted(t *testing.T) {
	if KillGroup(exec.Command("/bin/true")) {
		t.Fatal("KillGroup on an unstarted command reported a group")
	}
}
