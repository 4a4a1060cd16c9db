package adminapi

import (
	"context"
	"fmt"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// DeviceUpdater changes instance devices (core/instance.Manager); the
// Instances given in Config provide it when they implement it.
type DeviceUpdater interface {
	UpdateDevices(ctx context.Context, name string, u instance.DeviceUpdate, by events.Requestor) (*instance.Instance, error)
}

// registerDevices adds the device routes to v1.
func (a *API) registerDevices(v1 fiber.Router) {
	v1.Post("/instances/:name/devices", a.addDevice)
	v1.Patch("/instances/:name/devices/:device", a.patchDevice)
	v1.Delete("/instances/:name/devices/:device", a.deleteDevice)
}

func (a *API) deviceUpdater() (DeviceUpdater, error) {
	d, ok := a.cfg.Instances.(DeviceUpdater)
	if !ok {
		return nil, fmt.Errorf("this daemon's instance service cannot change devices: %w", errdefs.ErrNotSupported)
	}
	return d, nil
}

func deviceParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("device")
	name, err := url.PathUnescape(raw)
	if err != nil || name == "" {
		return "", badRequest("invalid device name %q", raw)
	}
	return name, nil
}

// addDevice answers POST /1.0/instances/{name}/devices with the instance.
func (a *API) addDevice(c *fiber.Ctx) error {
	svc, err := a.deviceUpdater()
	if err != nil {
		return err
	}
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.DevicesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return badRequest("invalid device: no name")
	}
	inst, err := svc.UpdateDevices(c.UserContext(), name, instance.DeviceUpdate{Add: map[string]map[string]string{req.Name: req.Device}}, requestor(c))
	if err != nil {
		return err
	}
	return syncCreated(c, instance.WireInstance(inst, nil))
}

// patchDevice answers PATCH /1.0/instances/{name}/devices/{device}.
func (a *API) patchDevice(c *fiber.Ctx) error {
	svc, err := a.deviceUpdater()
	if err != nil {
		return err
	}
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	dev, err := deviceParam(c)
	if err != nil {
		return err
	}
	var req api.DevicePatch
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if len(req.Config) == 0 && len(req.Unset) == 0 {
		return badRequest("nothing to change: give device keys to set or unset")
	}
	keys := map[string]string{}
	for k, v := range req.Config {
		if k == "" || v == "" {
			return badRequest("invalid device key %q=%q: empty key or value (unset it instead)", k, v)
		}
		keys[k] = v
	}
	for _, k := range req.Unset {
		if _, ok := keys[k]; ok {
			return badRequest("device key %q is both set and unset", k)
		}
		keys[k] = ""
	}
	inst, err := svc.UpdateDevices(c.UserContext(), name, instance.DeviceUpdate{Patch: map[string]map[string]string{dev: keys}}, requestor(c))
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, nil))
}

// deleteDevice answers DELETE /1.0/instances/{name}/devices/{device}.
func (a *API) deleteDevice(c *fiber.Ctx) error {
	svc, err := a.deviceUpdater()
	if err != nil {
		return err
	}
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	dev, err := deviceParam(c)
	if err != nil {
		return err
	}
	inst, err := svc.UpdateDevices(c.UserContext(), name, instance.DeviceUpdate{Remove: []string{dev}}, requestor(c))
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, nil))
}
