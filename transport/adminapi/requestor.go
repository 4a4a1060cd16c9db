package adminapi

import (
	"net"
	"os/user"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
)

// Requestor protocols of the admin API.
const (
	ProtocolUnix   = api.ProtocolUnix
	ProtocolTLS    = api.ProtocolTLS
	ProtocolBearer = api.ProtocolBearer
	// ProtocolHTTP is kept for requests of unknown origin (no connection).
	ProtocolHTTP = "http"
)

// requestor says who sent the request, as authenticate found it: on the
// Unix socket the peer's user and uid (SO_PEERCRED), on TCP the trusted
// certificate or the bearer identity, with the remote address.
func requestor(c *fiber.Ctx) events.Requestor {
	if by, ok := c.Locals(requestorKey).(events.Requestor); ok {
		return by
	}
	conn := c.Context().Conn()
	if conn == nil {
		return events.Requestor{Protocol: ProtocolHTTP, Address: c.Context().RemoteAddr().String()}
	}
	if uc, ok := unwrapUnix(conn); ok {
		return unixRequestor(uc)
	}
	return events.Requestor{Protocol: ProtocolHTTP, Address: conn.RemoteAddr().String()}
}

// unixRequestor is the requestor of a request on the admin socket.
func unixRequestor(uc *net.UnixConn) events.Requestor {
	name, uid := peerUser(uc)
	return events.Requestor{Protocol: ProtocolUnix, Username: name, UID: uid}
}

// unwrapUnix returns conn as a Unix socket connection, looking through
// wrappers that expose their inner connection with NetConn.
func unwrapUnix(conn net.Conn) (*net.UnixConn, bool) {
	for range 4 {
		switch c := conn.(type) {
		case *net.UnixConn:
			return c, true
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			return nil, conn.RemoteAddr() != nil && conn.RemoteAddr().Network() == "unix"
		}
	}
	return nil, false
}

// peerUser names the user at the other end of uc and its uid ("" if
// unknown; the name is the uid when it has no passwd entry).
func peerUser(uc *net.UnixConn) (string, string) {
	if uc == nil {
		return "", ""
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "", ""
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return "", ""
	}
	uid := strconv.FormatUint(uint64(cred.Uid), 10)
	if u, err := user.LookupId(uid); err == nil {
		return u.Username, uid
	}
	return uid, uid
}
