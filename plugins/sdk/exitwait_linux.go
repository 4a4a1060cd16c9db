package sdk

import (
	"os"

	"golang.org/x/sys/unix"
)

// processExit returns a channel closed once process pid has exited, waiting
// on a pidfd in the runtime's poller: no thread and no timer while the
// process runs. stop ends the wait (the channel is then closed too). It
// fails where pidfds are not available (Linux before 5.3); the caller then
// polls.
func processExit(pid int) (exited <-chan struct{}, stop func(), err error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		// The poller wakes this read when the pidfd becomes readable: the
		// process exited. An error (the file closed by stop) ends it too.
		_ = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			return err != nil || n > 0
		})
	}()
	return ch, func() { f.Close() }, nil
}
