// Package sdnotify tells systemd about a service's state (sd_notify(3)):
// a datagram such as "READY=1" to the socket $NOTIFY_SOCKET names. The
// agent's and the daemon's units are Type=notify: the agent sends READY=1
// once /dev/lxd/sock answers (so cloud-init-local, ordered after it, starts
// only then), the daemon once its admin socket answers. It is a few lines,
// so neither links a systemd library.
package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// EnvSocket is the variable systemd sets for Type=notify services.
const EnvSocket = "NOTIFY_SOCKET"

// Ready is the state sent when the service is up.
const Ready = "READY=1"

// Notify sends state to $NOTIFY_SOCKET. It reports false without error
// when the variable is unset (not started by systemd). A name starting
// with '@' is in the abstract namespace.
func Notify(state string) (bool, error) {
	return NotifySocket(os.Getenv(EnvSocket), state)
}

// NotifySocket sends state to the socket name (a $NOTIFY_SOCKET value
// taken earlier, e.g. before unsetting it so that child processes do not
// inherit it); "" sends nothing.
func NotifySocket(name, state string) (bool, error) {
	if name == "" {
		return false, nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notifying systemd: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notifying systemd of %q: %w", state, err)
	}
	return true, nil
}
