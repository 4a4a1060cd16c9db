package adminapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// Profiles is the profile service behind the /1.0/profiles routes; the
// instance service (core/instance.Manager) implements it, and the API
// finds it there: profiles are part of how instances are made.
type Profiles interface {
	Profiles(ctx context.Context) ([]*instance.Profile, error)
	Profile(ctx context.Context, name string) (*instance.Profile, error)
	CreateProfile(ctx context.Context, name string, p instance.ProfilePut) (*instance.Profile, error)
	UpdateProfile(ctx context.Context, name string, p instance.ProfilePut, by events.Requestor) (*instance.Profile, error)
	RenameProfile(ctx context.Context, oldName, newName string) error
	DeleteProfile(ctx context.Context, name string) error
	AssignProfiles(ctx context.Context, name string, profiles []string, by events.Requestor) (*instance.Instance, error)
}

var _ Profiles = (*instance.Manager)(nil)

// registerProfiles adds LXD's profile routes to v1.
func (a *API) registerProfiles(v1 fiber.Router) {
	v1.Get("/profiles", a.listProfiles)
	v1.Post("/profiles", a.createProfile)
	v1.Get("/profiles/:profile", a.getProfile)
	v1.Put("/profiles/:profile", a.putProfile)
	v1.Patch("/profiles/:profile", a.patchProfile)
	v1.Post("/profiles/:profile", a.renameProfile)
	v1.Delete("/profiles/:profile", a.deleteProfile)
}

func (a *API) profiles() (Profiles, error) {
	p, ok := a.cfg.Instances.(Profiles)
	if !ok {
		return nil, fmt.Errorf("profiles are not served by this daemon: %w", errdefs.ErrNotSupported)
	}
	return p, nil
}

// WireProfile converts a profile to its wire form (used_by as URLs, as LXD).
func WireProfile(p *instance.Profile) api.Profile {
	used := make([]string, 0, len(p.UsedBy))
	for _, n := range p.UsedBy {
		used = append(used, "/1.0/instances/"+url.PathEscape(n))
	}
	cfg, devs := p.Config, p.Devices
	if cfg == nil {
		cfg = map[string]string{}
	}
	if devs == nil {
		devs = map[string]map[string]string{}
	}
	return api.Profile{Name: p.Name, ProfilePut: api.ProfilePut{Description: p.Description, Config: cfg, Devices: devs}, UsedBy: used}
}

// profileETag is the entity tag of a profile's writable part (as LXD: a
// hash of what a PUT would send).
func profileETag(p *instance.Profile) string {
	b, _ := json.Marshal([]any{p.Name, p.Description, p.Config, p.Devices})
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// checkIfMatch answers 412 when the request's If-Match names another
// version of the profile than the stored one.
func checkIfMatch(c *fiber.Ctx, p *instance.Profile) error {
	want := c.Get(fiber.HeaderIfMatch)
	if want == "" || want == "*" {
		return nil
	}
	if want != profileETag(p) {
		return fiber.NewError(http.StatusPreconditionFailed, fmt.Sprintf("profile %q was changed since it was read (If-Match %s does not match its ETag)", p.Name, want))
	}
	return nil
}

func (a *API) listProfiles(c *fiber.Ctx) error {
	svc, err := a.profiles()
	if err != nil {
		return err
	}
	list, err := svc.Profiles(c.UserContext())
	if err != nil {
		return err
	}
	if c.Query("recursion") == "" || c.Query("recursion") == "0" {
		urls := make([]string, 0, len(list))
		for _, p := range list {
			urls = append(urls, "/1.0/profiles/"+url.PathEscape(p.Name))
		}
		return sync200(c, urls)
	}
	out := make([]api.Profile, 0, len(list))
	for _, p := range list {
		out = append(out, WireProfile(p))
	}
	return sync200(c, out)
}

func (a *API) createProfile(c *fiber.Ctx) error {
	svc, err := a.profiles()
	if err != nil {
		return err
	}
	var req api.ProfilesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	p, err := svc.CreateProfile(c.UserContext(), req.Name, putOf(req.ProfilePut))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderLocation, "/1.0/profiles/"+url.PathEscape(p.Name))
	c.Set(fiber.HeaderETag, profileETag(p))
	return syncCreated(c, WireProfile(p))
}

func (a *API) getProfile(c *fiber.Ctx) error {
	svc, name, err := a.profileParam(c)
	if err != nil {
		return err
	}
	p, err := svc.Profile(c.UserContext(), name)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderETag, profileETag(p))
	return sync200(c, WireProfile(p))
}

// putProfile replaces a profile's description, config and devices.
func (a *API) putProfile(c *fiber.Ctx) error {
	return a.updateProfile(c, false)
}

// patchProfile merges config keys ("" unsets one) and devices (each
// replaced whole; a device of no keys removes it) into a profile, and
// sets the description when one is given.
func (a *API) patchProfile(c *fiber.Ctx) error {
	return a.updateProfile(c, true)
}

func (a *API) updateProfile(c *fiber.Ctx, merge bool) error {
	svc, name, err := a.profileParam(c)
	if err != nil {
		return err
	}
	var req api.ProfilePut
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	cur, err := svc.Profile(c.UserContext(), name)
	if err != nil {
		return err
	}
	if err := checkIfMatch(c, cur); err != nil {
		return err
	}
	put := putOf(req)
	if merge {
		if len(req.Config) == 0 && len(req.Devices) == 0 && req.Description == "" {
			return badRequest("nothing to change: give a description, config keys or devices")
		}
		put = instance.ProfilePut{Description: cur.Description, Config: maps.Clone(cur.Config), Devices: maps.Clone(cur.Devices)}
		if req.Description != "" {
			put.Description = req.Description
		}
		if put.Config == nil {
			put.Config = map[string]string{}
		}
		if put.Devices == nil {
			put.Devices = map[string]map[string]string{}
		}
		for k, v := range req.Config {
			if v == "" {
				delete(put.Config, k)
			} else {
				put.Config[k] = v
			}
		}
		for n, d := range req.Devices {
			if len(d) == 0 {
				delete(put.Devices, n)
			} else {
				put.Devices[n] = d
			}
		}
	}
	p, err := svc.UpdateProfile(c.UserContext(), name, put, requestor(c))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderETag, profileETag(p))
	return sync200(c, WireProfile(p))
}

func (a *API) renameProfile(c *fiber.Ctx) error {
	svc, name, err := a.profileParam(c)
	if err != nil {
		return err
	}
	var req api.ProfilePost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return badRequest("invalid rename of profile %q: no new name", name)
	}
	if err := svc.RenameProfile(c.UserContext(), name, req.Name); err != nil {
		return err
	}
	c.Set(fiber.HeaderLocation, "/1.0/profiles/"+url.PathEscape(req.Name))
	return syncCreated(c, map[string]any{})
}

func (a *API) deleteProfile(c *fiber.Ctx) error {
	svc, name, err := a.profileParam(c)
	if err != nil {
		return err
	}
	if err := svc.DeleteProfile(c.UserContext(), name); err != nil {
		return err
	}
	return sync200(c, map[string]any{})
}

// assignProfiles is PATCH /1.0/instances/{name} with a profiles list.
func (a *API) assignProfiles(c *fiber.Ctx, name string, profiles []string) error {
	svc, err := a.profiles()
	if err != nil {
		return err
	}
	inst, err := svc.AssignProfiles(c.UserContext(), name, profiles, requestor(c))
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, nil))
}

func (a *API) profileParam(c *fiber.Ctx) (Profiles, string, error) {
	svc, err := a.profiles()
	if err != nil {
		return nil, "", err
	}
	name, err := param(c, "profile")
	if err != nil {
		return nil, "", err
	}
	return svc, name, nil
}

func putOf(p api.ProfilePut) instance.ProfilePut {
	return instance.ProfilePut{Description: p.Description, Config: p.Config, Devices: p.Devices}
}
