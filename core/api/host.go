package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// CheckHost is a fiber middleware that refuses (403) a request that arrived
// on a loopback TCP address but whose Host names something other than
// localhost or an IP address. A web
// page whose DNS name an attacker rebinds to 127.0.0.1 (DNS rebinding) is
// same-origin for the browser, so neither Content-Type nor Origin checks
// stop it; its Host header still names the attacker's domain. Requests on
// the Unix socket and on other addresses pass. Register applies it to the
// /1.0 routes; a daemon serving more routes on the same TCP listener (the
// dashboard) applies it to the whole app with app.Use(CheckHost).
func CheckHost(c *fiber.Ctx) error {
	la, ok := c.Context().LocalAddr().(*net.TCPAddr)
	if !ok || !la.IP.IsLoopback() {
		return c.Next()
	}
	host := string(c.Request().Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" || strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil {
		return c.Next()
	}
	return fiber.NewError(http.StatusForbidden,
		fmt.Sprintf("host %q is not accepted on a loopback address: use localhost or an IP address", host))
}
