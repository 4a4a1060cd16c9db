package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// Snapshots returns GET /1.0/instances/{name}/snapshots (oldest first).
func (c *Client) Snapshots(ctx context.Context, name string) ([]api.InstanceSnapshot, error) {
	var out []api.InstanceSnapshot
	if err := c.do(ctx, http.MethodGet, instancePath(name, "snapshots"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Snapshot returns GET /1.0/instances/{name}/snapshots/{snap}.
func (c *Client) Snapshot(ctx context.Context, name, snap string) (*api.InstanceSnapshot, error) {
	var out api.InstanceSnapshot
	if err := c.do(ctx, http.MethodGet, instancePath(name, "snapshots", url.PathEscape(snap)), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateSnapshot sends POST /1.0/instances/{name}/snapshots.
func (c *Client) CreateSnapshot(ctx context.Context, name string, req api.InstanceSnapshotsPost) (*api.InstanceSnapshot, error) {
	var out api.InstanceSnapshot
	if err := c.do(ctx, http.MethodPost, instancePath(name, "snapshots"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RenameSnapshot sends POST /1.0/instances/{name}/snapshots/{snap} {"name": newName}.
func (c *Client) RenameSnapshot(ctx context.Context, name, snap, newName string) (*api.InstanceSnapshot, error) {
	var out api.InstanceSnapshot
	err := c.do(ctx, http.MethodPost, instancePath(name, "snapshots", url.PathEscape(snap)), nil, api.InstanceSnapshotPost{Name: newName}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot sends DELETE /1.0/instances/{name}/snapshots/{snap}.
func (c *Client) DeleteSnapshot(ctx context.Context, name, snap string) error {
	return c.do(ctx, http.MethodDelete, instancePath(name, "snapshots", url.PathEscape(snap)), nil, nil, nil)
}

// Restore sends PUT /1.0/instances/{name} {"restore": snap, "stateful": ...}
// and returns the instance's state afterwards.
func (c *Client) Restore(ctx context.Context, name string, req api.InstancePut) (*api.InstanceState, error) {
	var st api.InstanceState
	if err := c.do(ctx, http.MethodPut, instancePath(name), nil, req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Move sends POST /1.0/instances/{name} {"backend": backend} and returns
// the moved instance.
func (c *Client) Move(ctx context.Context, name, backend string) (*api.Instance, error) {
	var out api.Instance
	if err := c.do(ctx, http.MethodPost, instancePath(name), nil, api.InstancePost{Backend: backend}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
