// Package testwait waits, in tests, for what no event announces: another
// process's state, a file, a socket, a counter of a library. It polls with
// a short backoff up to a deadline in this one place, so a test never sleeps
// for a guessed time; where an event exists (a channel, a process exit) the
// test should wait for that instead (ProcessExit does, with a pidfd).
package testwait

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sys/unix"
)

// Poll bounds: a condition is checked again after 1 ms, then ever less
// often, at least every 50 ms.
const (
	firstPoll = time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// Until evaluates cond until it reports true or d has passed, and reports
// whether it held. cond runs at least once, and once more at the deadline.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	bo := &backoff.ExponentialBackOff{InitialInterval: firstPoll, Multiplier: 2, MaxInterval: maxPoll}
	poll := time.NewTimer(bo.NextBackOff())
	defer poll.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-poll.C:
			poll.Reset(bo.NextBackOff())
		}
	}
}

// For is Until that fails t ("timed out after D waiting for WHAT") when
// cond does not hold within d.
func For(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// ProcessExit waits until process pid has exited (a zombie counts as
// exited: its parent may be init, reaping late) or d passed. It waits on a
// pidfd, which becomes readable when the process exits, also for processes
// that are not the caller's children. A pid that does not exist has exited.
func ProcessExit(pid int, d time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening a pidfd for process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for process %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
		return fmt.Errorf("process %d still running after %v", pid, d)
	}
}
