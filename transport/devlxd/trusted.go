package devlxd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

// Tokens checks devlxd bearer tokens (*auth.Service implements it).
type Tokens interface {
	// AuthenticateDevlxd returns the identity of a live devlxd token
	// scoped to the instance caller, or an error wrapping
	// errdefs.ErrUnauthorized (not a live devlxd token) or
	// errdefs.ErrForbidden (not scoped to caller).
	AuthenticateDevlxd(ctx context.Context, token, caller string) (*auth.DevlxdCaller, error)
}

// KeyManagementVolumes is the instance key that lets a trusted caller in
// the guest manage volumes and devices through devlxd (as LXD's key of the
// same name): without "true" the management routes answer 403.
const KeyManagementVolumes = instance.KeySecurityDevlxdManagementVolumes

const localsTrusted = "devlxd.trusted"

// Messages of the trusted API, LXD's (LXD 6.x, lxd/auth/bearer and the
// JWT library it uses: an expired token fails the claims check, a token
// whose identity has no signing secret any more is an unknown subject).
const (
	msgMustAuthenticate = "You must be authenticated"
	msgBadToken         = "Failed verifying bearer token: "
	msgTokenUnknown     = "Unrecognized token subject: No secret found for bearer token identity"
	msgTokenExpired     = "Failed authenticating bearer token: Token is not valid: token has invalid claims: token is expired"
)

// trustedRoute is one route of the trusted management API and the methods
// it serves; the other methods of HEAD, GET, POST, PUT, PATCH and DELETE
// answer 501, any other method 404 (as LXD).
type trustedRoute struct {
	path    string
	methods []string
	// vmMissing is a method of methods LXD's VM agent does not route
	// (501 to a VM guest).
	vmMissing string
}

// trustedRoutes are LXD's devlxd management routes.
var trustedRoutes = []trustedRoute{
	{"/1.0/instances/:name", []string{fiber.MethodGet, fiber.MethodPatch}, ""},
	{"/1.0/operations/:id", []string{fiber.MethodDelete}, ""},
	{"/1.0/operations/:id/wait", []string{fiber.MethodGet}, ""},
	{"/1.0/storage-pools/:pool", []string{fiber.MethodGet}, ""},
	{"/1.0/storage-pools/:pool/volumes", []string{fiber.MethodGet, fiber.MethodPost}, ""},
	{"/1.0/storage-pools/:pool/volumes/:type", []string{fiber.MethodGet, fiber.MethodPost}, ""},
	{"/1.0/storage-pools/:pool/volumes/:type/:volume", []string{fiber.MethodGet, fiber.MethodPut, fiber.MethodPatch, fiber.MethodDelete}, fiber.MethodPut},
	{"/1.0/storage-pools/:pool/volumes/:type/:volume/snapshots", []string{fiber.MethodGet, fiber.MethodPost}, ""},
	{"/1.0/storage-pools/:pool/volumes/:type/:volume/snapshots/:snapshot", []string{fiber.MethodGet, fiber.MethodDelete}, ""},
}

// standardMethods are the methods LXD's devlxd router dispatches.
var standardMethods = []string{fiber.MethodHead, fiber.MethodGet, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch, fiber.MethodDelete}

// registerTrusted gates the management routes: a method the route does
// not serve is 501 (404 for a non-standard method), an untrusted caller
// 403 "You must be authenticated". Routes that pass the gate go to the
// handlers registered after it; those without one end in the 404
// catch-all.
func (s *Server) registerTrusted() {
	for _, r := range trustedRoutes {
		s.app.All(r.path, func(c *fiber.Ctx) error {
			switch {
			case !slices.Contains(standardMethods, c.Method()):
				return sendError(c, http.StatusNotFound, "Method \""+c.Method()+"\" not found")
			case !slices.Contains(r.methods, c.Method()) || (r.vmMissing == c.Method() && s.isVM(c)):
				return s.notImplemented(c)
			case !guestview.DevlxdEnabled(callerOf(c).Config):
				return sendError(c, http.StatusForbidden, "")
			case trustedOf(c) == nil:
				return sendError(c, http.StatusForbidden, msgMustAuthenticate)
			}
			return c.Next()
		})
	}
	s.app.Get("/1.0/instances/:name", s.managed(s.answer(s.getInstance)))
	s.registerManagement()
}

// bearer authenticates the Authorization: Bearer token a guest sent, if
// any, for the calling instance inst, by LXD's rule: only a value of devlxd
// token form (auth.IsDevlxdToken) is checked; any other value (an admin API
// token, another service's token, random bytes) is ignored and the caller
// stays untrusted, as without the header. A devlxd token that does not
// verify (unknown, revoked, expired) or is not scoped to inst is answered
// 403 "Failed verifying bearer token: <reason>" on every route, as LXD
// refuses devlxd altogether for a token of its own it cannot verify; bearer
// then returns false.
func (s *Server) bearer(c *fiber.Ctx, inst *instance.Instance) bool {
	token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	if !ok || !auth.IsDevlxdToken(token) {
		return true
	}
	if s.cfg.Tokens == nil {
		// No identity can hold it: LXD's answer for a subject it has no
		// secret for.
		_ = sendError(c, http.StatusForbidden, msgBadToken+msgTokenUnknown)
		return false
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	who, err := s.cfg.Tokens.AuthenticateDevlxd(ctx, token, inst.Name)
	switch {
	case errors.Is(err, errdefs.ErrUnauthorized), errors.Is(err, errdefs.ErrForbidden):
		s.cfg.Logger.Warn("devlxd: bearer token refused", "instance", inst.Name, "err", err)
		_ = sendError(c, http.StatusForbidden, msgBadToken+tokenReason(err))
		return false
	case err != nil:
		s.cfg.Logger.Error("devlxd: checking bearer token", "instance", inst.Name, "err", err)
		_ = sendError(c, http.StatusInternalServerError, "")
		return false
	}
	c.Locals(localsTrusted, who)
	return true
}

// tokenReason is the guest-facing reason of a refused devlxd token: LXD's
// words for an expired token and for one no identity holds; for a token
// not scoped to the calling instance (a guestlink rule LXD does not have)
// the error without its errdefs kind.
func tokenReason(err error) string {
	switch {
	case errors.Is(err, auth.ErrDevlxdTokenExpired):
		return msgTokenExpired
	case errors.Is(err, errdefs.ErrUnauthorized):
		return msgTokenUnknown
	}
	return strings.TrimSuffix(err.Error(), ": "+errdefs.ErrForbidden.Error())
}

// trustedOf returns the devlxd identity of an authenticated request, or
// nil.
func trustedOf(c *fiber.Ctx) *auth.DevlxdCaller {
	who, _ := c.Locals(localsTrusted).(*auth.DevlxdCaller)
	return who
}

// info answers GET /1.0 for the caller: "trusted" with the environment
// when a devlxd token authenticated it.
func (s *Server) info(c *fiber.Ctx, info devlxdapi.Info) any {
	if trustedOf(c) == nil {
		return info
	}
	info.Auth = devlxdapi.AuthTrusted
	return devlxdapi.TrustedInfo{Info: info}
}

// managed wraps a management handler: the calling instance must have
// security.devlxd.management.volumes=true (else 403, as LXD).
func (s *Server) managed(h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if !isTrue(callerOf(c).Config[KeyManagementVolumes]) {
			return sendError(c, http.StatusForbidden, "")
		}
		return h(c)
	}
}

func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true
	}
	return false
}

// ownerKey is the instance config key recording which devlxd identity
// added a device through devlxd (volatile.<dev>.devlxd.owner).
func ownerKey(dev string) string { return "volatile." + dev + ".devlxd.owner" }

// ownedDevices returns the devices of inst that the identity added.
func ownedDevices(inst *instance.Instance, who *auth.DevlxdCaller) map[string]map[string]string {
	out := map[string]map[string]string{}
	for name, dev := range inst.Devices {
		if inst.Config[ownerKey(name)] == auth.TypeDevlxd+"/"+who.Name {
			cp := make(map[string]string, len(dev))
			for k, v := range dev {
				cp[k] = v
			}
			out[name] = cp
		}
	}
	return out
}

// target returns the instance a management route names, when the caller's
// identity is scoped to it; otherwise a 404 refusal (an instance outside
// the scope is not shown to exist).
func (s *Server) target(c *fiber.Ctx) (*instance.Instance, error) {
	who := trustedOf(c)
	name := c.Params("name")
	if !slices.Contains(who.Instances, name) {
		return nil, refuse(http.StatusNotFound, "")
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	inst, err := s.cfg.Instances.Get(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, refuse(http.StatusNotFound, "")
	}
	if err != nil {
		return nil, fmt.Errorf("looking up instance %q: %w", name, err)
	}
	return inst, nil
}

// getInstance answers GET /1.0/instances/{name}: the name and the devices
// the caller's identity owns, with the instance's ETag.
func (s *Server) getInstance(c *fiber.Ctx) (reply, error) {
	inst, err := s.target(c)
	if err != nil {
		return reply{}, err
	}
	return reply{value: devlxdapi.Instance{Name: inst.Name, Devices: ownedDevices(inst, trustedOf(c))}, etag: instanceETag(inst)}, nil
}
