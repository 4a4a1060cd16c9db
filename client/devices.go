package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// AddDevice adds the device dev (config with "type") to instance name.
func (c *Client) AddDevice(ctx context.Context, name, dev string, config map[string]string) (*api.Instance, error) {
	var inst api.Instance
	if err := c.do(ctx, http.MethodPost, instancePath(name, "devices"), nil, api.DevicesPost{Name: dev, Device: config}, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// SetDevice sets (and unsets) keys of the device dev of instance name.
func (c *Client) SetDevice(ctx context.Context, name, dev string, set map[string]string, unset []string) (*api.Instance, error) {
	var inst api.Instance
	if err := c.do(ctx, http.MethodPatch, instancePath(name, "devices", url.PathEscape(dev)), nil, api.DevicePatch{Config: set, Unset: unset}, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// RemoveDevice removes the device dev from instance name.
func (c *Client) RemoveDevice(ctx context.Context, name, dev string) (*api.Instance, error) {
	var inst api.Instance
	if err := c.do(ctx, http.MethodDelete, instancePath(name, "devices", url.PathEscape(dev)), nil, nil, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}
