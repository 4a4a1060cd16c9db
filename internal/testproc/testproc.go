// Package testproc starts processes for tests in their own process group and
// ends the whole group when the test ends, so that no child, grandchild or
// forgotten `sleep` outlives the test.
package testproc

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// Start starts cmd in a new process group (keeping any other SysProcAttr
// fields the caller set, such as Pdeathsig) and registers a cleanup that
// sends SIGKILL to the whole group and reaps cmd. It fails t if cmd does not
// start.
func Start(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := StartGroup(cmd); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		KillGroup(cmd)
		cmd.Wait() // an error is expected: the process was killed
	})
}

// StartGroup starts cmd in a new process group, for callers that manage
// its end themselves (with KillGroup) rather than through a test cleanup.
func StartGroup(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	return cmd.Start()
}

// KillGroup sends SIGKILL to the process group led by cmd's process. It
// reports whether the group existed; it does not wait for cmd.
func KillGroup(cmd *exec.Cmd) bool {
	if cmd.Process == nil {
		return false
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return err == nil || !errors.Is(err, syscall.ESRCH)
}
