package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// InstallBackend installs the plugin binary at path, a file on the
// daemon's machine that the daemon reads, as the backend name ("" for the
// file's name) without a daemon restart (POST /1.0/backends): the daemon
// copies it into its plugin directory, writes its checksum into SHA256SUMS
// and starts it, or restarts it on the new binary. It returns the backend
// once the new process runs or failed to start.
func (c *Client) InstallBackend(ctx context.Context, path, name string) (*api.Backend, error) {
	var b api.Backend
	if err := c.do(ctx, http.MethodPost, "/1.0/backends", nil, api.BackendInstall{Path: path, Name: name}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// ReloadBackend makes the daemon read SHA256SUMS again and restart the
// backend on the binary now in its plugin directory (POST
// /1.0/backends/{name}/reload). A binary that does not match its checksum
// is refused (the error shows both hashes) and a running plugin keeps
// running.
func (c *Client) ReloadBackend(ctx context.Context, name string) (*api.Backend, error) {
	var b api.Backend
	if err := c.do(ctx, http.MethodPost, "/1.0/backends/"+url.PathEscape(name)+"/reload", nil, nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
