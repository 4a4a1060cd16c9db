package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// ImageBuilds lists the image builds running and those failed lately
// (GET /1.0/images/builds).
func (c *Client) ImageBuilds(ctx context.Context) ([]api.ImageBuild, error) {
	var out []api.ImageBuild
	if err := c.do(ctx, http.MethodGet, "/1.0/images/builds", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// StartImageBuild registers a build of the image name with the daemon
// (POST /1.0/images/builds); the answer's ID names it in reports.
func (c *Client) StartImageBuild(ctx context.Context, name string) (*api.ImageBuild, error) {
	var out api.ImageBuild
	if err := c.do(ctx, http.MethodPost, "/1.0/images/builds", nil, api.ImageBuildsPost{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReportImageBuild reports the build id's stage, progress or end (PATCH
// /1.0/images/builds/{id}).
func (c *Client) ReportImageBuild(ctx context.Context, id string, r api.ImageBuildPatch) (*api.ImageBuild, error) {
	var out api.ImageBuild
	if err := c.do(ctx, http.MethodPatch, "/1.0/images/builds/"+url.PathEscape(id), nil, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
