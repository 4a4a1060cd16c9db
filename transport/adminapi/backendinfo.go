package adminapi

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// registerBackendInfo adds GET /1.0/backends/{name}.
func (a *API) registerBackendInfo(v1 fiber.Router) {
	v1.Get("/backends/:name", a.getBackend)
}

// getBackend answers GET /1.0/backends/{name}: the backend object of the
// list with the config prefixes and keys the plugin declares. An unknown
// backend is 404; a plugin that has not answered Info yet has no keys.
func (a *API) getBackend(c *fiber.Ctx) error {
	raw := c.Params("name")
	name, err := url.PathUnescape(raw)
	if err != nil {
		return badRequest("invalid backend name %q: bad escape", raw)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return badRequest("invalid backend name %q: must be a plugin file name", name)
	}
	for _, s := range a.cfg.Backends.List() {
		if s.Name == name {
			return sync200(c, backendInfoOut(s))
		}
	}
	return fmt.Errorf("backend %q: no such plugin: %w", name, errdefs.ErrNotFound)
}

// backendInfoOut is backendOut with the plugin's config prefixes and keys.
func backendInfoOut(s pluginhost.Status) api.Backend {
	b := backendOut(s)
	b.ConfigPrefixes = s.ConfigPrefixes
	for _, k := range s.ConfigSchema {
		b.ConfigKeys = append(b.ConfigKeys, api.BackendConfigKey{Name: k.Name, Type: string(k.Type), Default: k.Default, Doc: k.Doc})
	}
	return b
}
