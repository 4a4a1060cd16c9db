package adminapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/pluginhost"
)

// backendRestarter is implemented by backend services that can restart a
// plugin on request (core/pluginhost.Host): RestartWait restarts the plugin
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
func (a *API) restartBackend(c *fiber.Ctx) error {
	raw := c.Params("name")
	name, err := url.PathUnescape(raw)
	if err != nil {
		return badRequest("invalid backend name %q: bad escape", raw)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return badRequest("invalid backend name %q: must be a plugin file name", name)
	}
	if len(c.Body()) > 0 {
		var none struct{}
		if err := decodeBody(c, &none); err != nil {
			return err
		}
	}
	r, ok := a.cfg.Backends.(backendRestarter)
	if !ok {
		return fiber.NewError(http.StatusNotImplemented, "restarting backends is not supported by this daemon")
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), restartWaitLimit)
	defer cancel()
	st, err := r.RestartWait(ctx, name)
	if err != nil {
		return err
	}
	return sync200(c, backendOut(st))
}
