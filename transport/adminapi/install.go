package adminapi

import (
	"context"
	"net/http"
	"path/filepath"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// backendInstaller is implemented by backend services that install and
// reload plugins without a daemon restart (plugins/pluginhost.Host): Install
// copies a binary into the plugin directory, writes its checksum and
// (re)starts it; Reload re-reads the checksum and restarts the plugin.
// Both return once the new launch attempt concluded or ctx ended.
type backendInstaller interface {
	Install(ctx context.Context, name, src string) (pluginhost.Status, error)
	Reload(ctx context.Context, name string) (pluginhost.Status, error)
}

var _ backendInstaller = (*pluginhost.Host)(nil)

// installer returns the installer behind the API, or a 501 error.
func (a *API) installer() (backendInstaller, error) {
	in, ok := a.cfg.Backends.(backendInstaller)
	if !ok {
		return nil, fiber.NewError(http.StatusNotImplemented, "installing backends is not supported by this daemon")
	}
	return in, nil
}

// installBackend answers POST /1.0/backends: the binary at path (on the
// daemon's machine) is installed as name and started; the answer is its
// backend object.
func (a *API) installBackend(r *request, req *api.BackendInstall) (any, error) {
	if req.Path == "" || !filepath.IsAbs(req.Path) {
		return nil, badRequest("invalid path %q: an absolute path of a file on the daemon's machine is required", req.Path)
	}
	if req.Name == "" {
		req.Name = filepath.Base(req.Path)
	}
	if err := pluginhost.CheckName(req.Name); err != nil {
		return nil, badRequest("%v", err)
	}
	in, err := a.installer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.UserContext(), restartWaitLimit)
	defer cancel()
	return backendOf(in.Install(ctx, req.Name, req.Path))
}

// reloadBackend answers POST /1.0/backends/{name}/reload: SHA256SUMS is
// read again and the plugin restarted on the binary now installed; the
// answer is its backend object.
func (a *API) reloadBackend(r *request) (any, error) {
	if err := noBody(r.Ctx); err != nil {
		return nil, err
	}
	in, err := a.installer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.UserContext(), restartWaitLimit)
	defer cancel()
	return backendOf(in.Reload(ctx, r.Param("name")))
}
