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
	"github.com/guestlink/guestlink/transport/httpwrap"
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
	const one = "/profiles/:profile"
	v1.Get("/profiles", a.ok(httpwrap.With(a.profiles, a.listProfiles)))
	v1.Post("/profiles", a.created(httpwrap.With(a.profiles, withBody(a.createProfile))))
	v1.Get(one, a.ok(httpwrap.With(a.profiles, a.getProfile), profileNameParam))
	v1.Put(one, a.ok(httpwrap.With(a.profiles, withBody(a.putProfile)), profileNameParam))
	v1.Patch(one, a.ok(httpwrap.With(a.profiles, withBody(a.patchProfile)), profileNameParam))
	v1.Post(one, a.created(httpwrap.With(a.profiles, withBody(a.renameProfile)), profileNameParam))
	v1.Delete(one, a.ok(httpwrap.With(a.profiles, a.deleteProfile), profileNameParam))
}

// profileNameParam is a profile's name in the path (the service checks it).
var profileNameParam = requiredParam("profile", "profile name", nil)

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

func (a *API) listProfiles(r *request, svc Profiles) (any, error) {
	list, err := svc.Profiles(r.UserContext())
	if err != nil {
		return nil, err
	}
	if q := r.Query("recursion"); q == "" || q == "0" {
		urls := make([]string, 0, len(list))
		for _, p := range list {
			urls = append(urls, "/1.0/profiles/"+url.PathEscape(p.Name))
		}
		return urls, nil
	}
	out := make([]api.Profile, 0, len(list))
	for _, p := range list {
		out = append(out, WireProfile(p))
	}
	return out, nil
}

// answerProfile answers p with its ETag (and its Location when made).
func answerProfile(r *request, p *instance.Profile, err error, made bool) (any, error) {
	if err != nil {
		return nil, err
	}
	if made {
		r.Set(fiber.HeaderLocation, "/1.0/profiles/"+url.PathEscape(p.Name))
	}
	r.Set(fiber.HeaderETag, profileETag(p))
	return WireProfile(p), nil
}

func (a *API) createProfile(r *request, svc Profiles, req *api.ProfilesPost) (any, error) {
	p, err := svc.CreateProfile(r.UserContext(), req.Name, putOf(req.ProfilePut))
	return answerProfile(r, p, err, true)
}

func (a *API) getProfile(r *request, svc Profiles) (any, error) {
	p, err := svc.Profile(r.UserContext(), r.Param("profile"))
	return answerProfile(r, p, err, false)
}

// putProfile replaces a profile's description, config and devices.
func (a *API) putProfile(r *request, svc Profiles, req *api.ProfilePut) (any, error) {
	return a.updateProfile(r, svc, req, false)
}

// patchProfile merges config keys ("" unsets one) and devices (each
// replaced whole; a device of no keys removes it) into a profile, and
// sets the description when one is given.
func (a *API) patchProfile(r *request, svc Profiles, req *api.ProfilePut) (any, error) {
	return a.updateProfile(r, svc, req, true)
}

func (a *API) updateProfile(r *request, svc Profiles, req *api.ProfilePut, merge bool) (any, error) {
	name := r.Param("profile")
	cur, err := svc.Profile(r.UserContext(), name)
	if err != nil {
		return nil, err
	}
	if err := checkIfMatch(r.Ctx, cur); err != nil {
		return nil, err
	}
	put := putOf(*req)
	if merge {
		if len(req.Config) == 0 && len(req.Devices) == 0 && req.Description == "" {
			return nil, badRequest("nothing to change: give a description, config keys or devices")
		}
		put = mergeProfile(cur, req)
	}
	p, err := svc.UpdateProfile(r.UserContext(), name, put, requestor(r.Ctx))
	return answerProfile(r, p, err, false)
}

// mergeProfile is PATCH's merge of req into the profile cur.
func mergeProfile(cur *instance.Profile, req *api.ProfilePut) instance.ProfilePut {
	put := instance.ProfilePut{Description: cur.Description, Config: maps.Clone(cur.Config), Devices: maps.Clone(cur.Devices)}
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
	return put
}

func (a *API) renameProfile(r *request, svc Profiles, req *api.ProfilePost) (any, error) {
	name := r.Param("profile")
	if req.Name == "" {
		return nil, badRequest("invalid rename of profile %q: no new name", name)
	}
	if err := svc.RenameProfile(r.UserContext(), name, req.Name); err != nil {
		return nil, err
	}
	r.Set(fiber.HeaderLocation, "/1.0/profiles/"+url.PathEscape(req.Name))
	return map[string]any{}, nil
}

func (a *API) deleteProfile(r *request, svc Profiles) (any, error) {
	if err := svc.DeleteProfile(r.UserContext(), r.Param("profile")); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// assignProfiles is PATCH /1.0/instances/{name} with a profiles list.
func (a *API) assignProfiles(r *request, name string, profiles []string) (any, error) {
	svc, err := a.profiles()
	if err != nil {
		return nil, err
	}
	return wireInstanceOf(svc.AssignProfiles(r.UserContext(), name, profiles, requestor(r.Ctx)))
}

func putOf(p api.ProfilePut) instance.ProfilePut {
	return instance.ProfilePut{Description: p.Description, Config: p.Config, Devices: p.Devices}
}
