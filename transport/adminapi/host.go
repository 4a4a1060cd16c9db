package adminapi

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// CheckHost is a fiber middleware that refuses (403) a TCP request
// whose Host header names anything but localhost, the IP address of the
// listener it arrived on (any loopback address on a loopback listener), or
// one of Config.Hosts (the daemon's --http-host). A web page whose DNS name an
// attacker rebinds to the daemon's address (DNS rebinding) is same-origin
// for the browser, so neither Content-Type nor Origin checks stop it; its
// Host header still names the attacker's domain. Requests on the Unix
// socket pass. Proxy headers (X-Forwarded-Host) are never read. Register
// applies it to the /1.0 routes (with Config.Hosts); a daemon serving more
// routes on the same TCP listener (the dashboard) applies it to the whole
// app with app.Use(a.CheckHost).
func (a *API) CheckHost(c *fiber.Ctx) error { return checkHost(c, a.cfg.Hosts) }

func checkHost(c *fiber.Ctx, names []string) error {
	la, ok := c.Context().LocalAddr().(*net.TCPAddr)
	if !ok {
		return c.Next()
	}
	host := requestHost(c)
	if hostAllowed(host, la.IP, names) {
		return c.Next()
	}
	return fiber.NewError(http.StatusForbidden,
		fmt.Sprintf("host %q is not accepted on %s: use localhost, the listener's address, or a name given to guestlinkd with --http-host", host, la.IP))
}

// requestHost returns the request's Host header without port and brackets.
// It never reads proxy headers.
func requestHost(c *fiber.Ctx) string {
	host := string(c.Request().Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}
