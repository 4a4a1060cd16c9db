package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// Images lists the daemon's image store (GET /1.0/images).
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var out []api.Image
	if err := c.do(ctx, http.MethodGet, "/1.0/images", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Image returns one image by fingerprint or unique fingerprint prefix; an
// alias is looked up first.
func (c *Client) Image(ctx context.Context, ref string) (*api.Image, error) {
	if a, err := c.ImageAlias(ctx, ref); err == nil {
		ref = a.Target
	}
	var out api.Image
	if err := c.do(ctx, http.MethodGet, "/1.0/images/"+url.PathEscape(ref), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImportImage makes the daemon copy the image file at req.Path (on the
// daemon's machine) into its store (POST /1.0/images).
func (c *Client) ImportImage(ctx context.Context, req api.ImagesPost) (*api.Image, error) {
	var out api.Image
	if err := c.do(ctx, http.MethodPost, "/1.0/images", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImageImports lists the imports in progress (GET /1.0/images/imports).
func (c *Client) ImageImports(ctx context.Context) ([]api.ImageImport, error) {
	var out []api.ImageImport
	if err := c.do(ctx, http.MethodGet, "/1.0/images/imports", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteImage removes an image (by alias, fingerprint or prefix) and its
// aliases.
func (c *Client) DeleteImage(ctx context.Context, ref string) error {
	if a, err := c.ImageAlias(ctx, ref); err == nil {
		ref = a.Target
	}
	return c.do(ctx, http.MethodDelete, "/1.0/images/"+url.PathEscape(ref), nil, nil, nil)
}

// UpdateImage changes the image ref (alias, fingerprint or unique prefix)
// as req says (PATCH /1.0/images/{fp}) and returns it.
func (c *Client) UpdateImage(ctx context.Context, ref string, req api.ImagePatch) (*api.Image, error) {
	if a, err := c.ImageAlias(ctx, ref); err == nil {
		ref = a.Target
	}
	var out api.Image
	if err := c.do(ctx, http.MethodPatch, "/1.0/images/"+url.PathEscape(ref), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImageAliases lists the aliases with their targets.
func (c *Client) ImageAliases(ctx context.Context) ([]api.ImageAlias, error) {
	var out []api.ImageAlias
	if err := c.do(ctx, http.MethodGet, "/1.0/images/aliases", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ImageAlias returns one alias.
func (c *Client) ImageAlias(ctx context.Context, name string) (*api.ImageAlias, error) {
	var out api.ImageAlias
	if err := c.do(ctx, http.MethodGet, "/1.0/images/aliases/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateImageAlias names an image.
func (c *Client) CreateImageAlias(ctx context.Context, req api.ImageAliasesPost) (*api.ImageAlias, error) {
	var out api.ImageAlias
	if err := c.do(ctx, http.MethodPost, "/1.0/images/aliases", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteImageAlias removes an alias (the image stays).
func (c *Client) DeleteImageAlias(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/images/aliases/"+url.PathEscape(name), nil, nil, nil)
}
