package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// RestartBackend restarts a backend plugin now (POST
// /1.0/backends/{name}/restart), resetting its backoff, and returns the
// backend once the new process runs or failed to start (its last_error then
// says why, and the supervisor keeps retrying).
func (c *Client) RestartBackend(ctx context.Context, name string) (*api.Backend, error) {
	var b api.Backend
	if err := c.do(ctx, http.MethodPost, "/1.0/backends/"+url.PathEscape(name)+"/restart", nil, nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Backend returns one backend plugin (GET /1.0/backends/{name}) with the
// config prefixes and keys it declares. An unknown backend is an error
// wrapping errdefs.ErrNotFound.
func (c *Client) Backend(ctx context.Context, name string) (*api.Backend, error) {
	var b api.Backend
	if err := c.do(ctx, http.MethodGet, "/1.0/backends/"+url.PathEscape(name), nil, nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
