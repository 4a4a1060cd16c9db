package adminapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// backendRestarter is implemented by backend services that can restart a
// plugin on request (plugins/pluginhost.Host): RestartWait restarts the plugin
// now, resetting its backoff, and returns once the new launch attempt
// concluded or ctx ended.
type backendRestarter interface {
	RestartWait(ctx context.Context, name string) (pluginhost.Status, error)
}

var _ backendRestarter = (*pluginhost.Host)(nil)

// restartWaitLimit bounds how long POST /1.0/backends/{name}/restart waits
// for the new plugin process before it answers with the status it has.
const restartWaitLimit = 30 * time.Second

// restartBackend answers POST /1.0/backends/{name}/restart: the plugin is
// restarted now (its failure count and backoff reset) and the answer is its
// backend object once the new process runs or failed to start.
func (a *API) restartBackend(r *request) (any, error) {
	if err := noBody(r.Ctx); err != nil {
		return nil, err
	}
	rs, ok := a.cfg.Backends.(backendRestarter)
	if !ok {
		return nil, fiber.NewError(http.StatusNotImplemented, "restarting backends is not supported by this daemon")
	}
	ctx, cancel := context.WithTimeout(r.UserContext(), restartWaitLimit)
	defer cancel()
	return backendOf(rs.RestartWait(ctx, r.Param("name")))
}

// backendOf answers a backend's status, or the error of getting it.
var backendOf = wired(backendOut)

// noBody accepts no body or the empty JSON object of a route that takes no
// input.
func noBody(c *fiber.Ctx) error {
	if len(c.Body()) == 0 {
		return nil
	}
	return decodeBody(c, &struct{}{})
}
