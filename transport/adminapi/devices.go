package adminapi

import (
	"context"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// DeviceUpdater changes instance devices (core/instance.Manager); the
// Instances given in Config provide it when they implement it.
type DeviceUpdater interface {
	UpdateDevices(ctx context.Context, name string, u instance.DeviceUpdate, by events.Requestor) (*instance.Instance, error)
}

// registerDevices adds the device routes to v1.
func (a *API) registerDevices(v1 fiber.Router) {
	name, dev := instanceNameParam, deviceNameParam
	v1.Post("/instances/:name/devices", a.created(httpwrap.With(a.deviceUpdater, withBody(a.addDevice)), name))
	v1.Patch("/instances/:name/devices/:device", a.ok(httpwrap.With(a.deviceUpdater, withBody(a.patchDevice)), name, dev))
	v1.Delete("/instances/:name/devices/:device", a.ok(httpwrap.With(a.deviceUpdater, a.deleteDevice), name, dev))
}

func (a *API) deviceUpdater() (DeviceUpdater, error) {
	return optional[DeviceUpdater](a.cfg.Instances, "this daemon's instance service cannot change devices")
}

// addDevice answers POST /1.0/instances/{name}/devices with the instance.
func (a *API) addDevice(r *request, svc DeviceUpdater, req *api.DevicesPost) (any, error) {
	if req.Name == "" {
		return nil, badRequest("invalid device: no name")
	}
	return a.updateDevices(r, svc, instance.DeviceUpdate{Add: map[string]map[string]string{req.Name: req.Device}})
}

// updateDevices applies u to the route's instance and answers the instance.
func (a *API) updateDevices(r *request, svc DeviceUpdater, u instance.DeviceUpdate) (any, error) {
	return wireInstanceOf(svc.UpdateDevices(r.UserContext(), r.Param("name"), u, requestor(r.Ctx)))
}

// patchDevice answers PATCH /1.0/instances/{name}/devices/{device}.
func (a *API) patchDevice(r *request, svc DeviceUpdater, req *api.DevicePatch) (any, error) {
	if len(req.Config) == 0 && len(req.Unset) == 0 {
		return nil, badRequest("nothing to change: give device keys to set or unset")
	}
	keys := map[string]string{}
	for k, v := range req.Config {
		if k == "" || v == "" {
			return nil, badRequest("invalid device key %q=%q: empty key or value (unset it instead)", k, v)
		}
		keys[k] = v
	}
	for _, k := range req.Unset {
		if _, ok := keys[k]; ok {
			return nil, badRequest("device key %q is both set and unset", k)
		}
		keys[k] = ""
	}
	return a.updateDevices(r, svc, instance.DeviceUpdate{Patch: map[string]map[string]string{r.Param("device"): keys}})
}

// deleteDevice answers DELETE /1.0/instances/{name}/devices/{device}.
func (a *API) deleteDevice(r *request, svc DeviceUpdater) (any, error) {
	return a.updateDevices(r, svc, instance.DeviceUpdate{Remove: []string{r.Param("device")}})
}
