package devlxd

import (
	"time"

	"github.com/gofiber/fiber/v2"
)

// RequestObserver is told of every devlxd request once it is answered
// (Config.Observer). route is the pattern of the route that answered (such
// as "/1.0/config/*"), or RouteNone when no route did (refused before
// routing, unknown path): never the raw path, so its values are bounded.
// method is one of the HTTP methods fiber routes, code the status sent.
// ObserveRequest is called on the request's goroutine and must be cheap.
type RequestObserver interface {
	ObserveRequest(route, method string, code int, elapsed time.Duration)
}

// RouteNone is the route of requests no route answered: refused by the
// authentication (401) or for an unknown path or method (404).
const RouteNone = "none"

// observe runs the rest of the stack, answers its error as the server's
// error handler would, and tells the observer. It shares its fiber route
// with authenticate: a request refused there ends on that route, and one
// that matched no path ends on the 404 catch-all ("/" as a prefix, while
// the root route matches "/" alone); both are RouteNone.
func (s *Server) observe(c *fiber.Ctx) error {
	obs := s.cfg.Observer
	if obs == nil {
		return c.Next()
	}
	start := time.Now()
	own := c.Route()
	if err := c.Next(); err != nil {
		if herr := errorHandler(c, err); herr != nil {
			return herr
		}
	}
	route := RouteNone
	if r := c.Route(); r != own && (r.Path != "/" || c.Path() == "/") {
		route = r.Path
	}
	obs.ObserveRequest(route, c.Method(), c.Response().StatusCode(), time.Since(start))
	return nil
}
