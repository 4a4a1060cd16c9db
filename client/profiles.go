package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

func profilePath(name string) string { return "/1.0/profiles/" + url.PathEscape(name) }

// Profiles lists every profile with its config, devices and users.
func (c *Client) Profiles(ctx context.Context) ([]api.Profile, error) {
	var out []api.Profile
	if err := c.do(ctx, http.MethodGet, "/1.0/profiles", url.Values{"recursion": {"1"}}, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Profile returns one profile.
func (c *Client) Profile(ctx context.Context, name string) (*api.Profile, error) {
	var p api.Profile
	if err := c.do(ctx, http.MethodGet, profilePath(name), nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// CreateProfile makes a profile.
func (c *Client) CreateProfile(ctx context.Context, req api.ProfilesPost) (*api.Profile, error) {
	var p api.Profile
	if err := c.do(ctx, http.MethodPost, "/1.0/profiles", nil, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// UpdateProfile replaces a profile's description, config and devices.
func (c *Client) UpdateProfile(ctx context.Context, name string, put api.ProfilePut) (*api.Profile, error) {
	var p api.Profile
	if err := c.do(ctx, http.MethodPut, profilePath(name), nil, put, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// RenameProfile renames a profile (not the default one).
func (c *Client) RenameProfile(ctx context.Context, name, newName string) error {
	return c.do(ctx, http.MethodPost, profilePath(name), nil, api.ProfilePost{Name: newName}, nil)
}

// DeleteProfile deletes a profile no instance uses (not the default one).
func (c *Client) DeleteProfile(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, profilePath(name), nil, nil, nil)
}

// AssignProfiles replaces an instance's profiles (an empty list: none).
func (c *Client) AssignProfiles(ctx context.Context, instance string, profiles []string) (*api.Instance, error) {
	if profiles == nil {
		profiles = []string{}
	}
	var inst api.Instance
	if err := c.do(ctx, http.MethodPatch, instancePath(instance), nil, api.InstancePatch{Profiles: &profiles}, &inst); err != nil {
		return nil, err
	}
	return &inst, nil
}
