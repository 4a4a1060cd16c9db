package devlxd

import (
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/guestview"
)

// methods maps the HTTP methods a route implements to their handlers.
type methods map[string]fiber.Handler

// route is one devlxd path (fiber syntax) and the methods it implements.
type route struct {
	path    string
	methods methods
}

// routeTable is every devlxd route, one line each (LXD 6.x's, see
// docs/devlxd.md). The trusted management routes (instances, operations,
// storage volumes) are registered after it by registerTrusted (trusted.go).
func (s *Server) routeTable() []route {
	return []route{
		{"/", methods{fiber.MethodGet: s.getRoot}},
		{"/1.0", methods{fiber.MethodGet: s.getInfo, fiber.MethodPatch: s.patchState}},
		{"/1.0/config", methods{fiber.MethodGet: s.getConfig}},
		{"/1.0/config/*", methods{fiber.MethodGet: s.getConfigKey}},
		{"/1.0/meta-data", methods{fiber.MethodGet: s.getMetaData}},
		{"/1.0/devices", methods{fiber.MethodGet: s.getDevices}},
		{"/1.0/events", methods{fiber.MethodGet: s.getEvents}},
		{"/1.0/images/:fingerprint/export", methods{fiber.MethodGet: s.getImageExport}},
		{"/1.0/ubuntu-pro", methods{fiber.MethodGet: s.getUbuntuPro}},
		{"/1.0/ubuntu-pro/token", methods{fiber.MethodPost: s.postUbuntuProToken}},
	}
}

// lxdMethods are the methods LXD's devlxd routes at all; any other one is
// answered 404 `Method "X" not found` on every route.
var lxdMethods = map[string]bool{
	fiber.MethodHead: true, fiber.MethodGet: true, fiber.MethodPost: true,
	fiber.MethodPut: true, fiber.MethodPatch: true, fiber.MethodDelete: true,
}

// routes registers the route table behind authentication; any other path
// is 404 Not Found.
func (s *Server) routes() {
	s.app.Use(s.observe, s.authenticate)
	for _, r := range s.routeTable() {
		s.app.All(r.path, dispatch(r.methods))
	}
	s.registerTrusted()
	s.app.Use(func(c *fiber.Ctx) error {
		if !guestview.DevlxdEnabled(callerOf(c).Config) {
			// A disabled devlxd refuses every path (LXD: any GET).
			return sendError(c, http.StatusForbidden, "")
		}
		return sendError(c, http.StatusNotFound, "")
	})
}

// dispatch answers a request on a route as LXD does: a method LXD does not
// route is 404 `Method "X" not found`, one the route does not implement 501
// Not Implemented (HEAD included), and an implemented one 403 Forbidden
// while the instance has security.devlxd off.
func dispatch(ms methods) fiber.Handler {
	return func(c *fiber.Ctx) error {
		m := c.Method()
		if !lxdMethods[m] {
			return sendError(c, http.StatusNotFound, fmt.Sprintf("Method %q not found", m))
		}
		h := ms[m]
		if h == nil {
			return sendError(c, http.StatusNotImplemented, "")
		}
		if !guestview.DevlxdEnabled(callerOf(c).Config) {
			return sendError(c, http.StatusForbidden, "")
		}
		return h(c)
	}
}
