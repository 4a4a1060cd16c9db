// Package hangup gives a request handler a context that ends when its
// client closes the connection, for servers (fasthttp, hence fiber) whose
// request contexts do not end then.
//
// It watches the connection's socket with poll(2) for POLLRDHUP, POLLHUP
// and POLLERR, which report the peer's close without reading anything, so
// the server's own reads (a pipelined request) are untouched. A client
// that shuts down only its writing half after the request (nc -N) counts
// as gone: HTTP clients keep it open for the answer. Only the handler that
// asks pays: one goroutine and one eventfd while it runs.
package hangup

import (
	"context"
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrClientGone is the cause of a context ended by the client's close.
var ErrClientGone = errors.New("the client closed the connection")

// Context returns a context derived from parent that is cancelled (cause
// ErrClientGone) as soon as the peer of conn closes it or the connection
// fails. Call stop when the handler returns: it ends the watch (and
// the context) and returns once the watcher is gone. A connection without
// a socket underneath (an in-memory pipe; wrappers are looked through
// with NetConn) is not watched: the context then ends only with parent.
func Context(parent context.Context, conn net.Conn) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	raw := rawConn(conn)
	if raw == nil {
		return ctx, func() { cancel(context.Canceled) }
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return ctx, func() { cancel(context.Canceled) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if watch(raw, efd) {
			cancel(ErrClientGone)
		}
	}()
	return ctx, func() {
		_, _ = unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-done
		_ = unix.Close(efd)
		cancel(context.Canceled)
	}
}

// watch blocks until the peer hangs up (true) or efd is written (false).
func watch(raw syscall.RawConn, efd int) (gone bool) {
	err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{
			{Fd: int32(fd), Events: unix.POLLRDHUP},
			{Fd: int32(efd), Events: unix.POLLIN},
		}
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			if fds[1].Revents != 0 {
				return
			}
			if fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				gone = true
				return
			}
		}
	})
	return err == nil && gone
}

// rawConn returns the socket under conn, looking through wrappers (TLS,
// limits) that expose their inner connection with NetConn; nil if none.
func rawConn(conn net.Conn) syscall.RawConn {
	for range 8 {
		if conn == nil {
			return nil
		}
		if sc, ok := conn.(syscall.Conn); ok {
			raw, err := sc.SyscallConn()
			if err != nil {
				return nil
			}
			return raw
		}
		w, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		conn = w.NetConn()
	}
	return nil
}
