package adminapi

import (
	"context"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// DevlxdIdentities manages the devlxd identities (core/auth.Service): the
// bearer identities a guest presents on /dev/lxd/sock, scoped to
// instances. The Authenticator given in Config provides them when it
// implements this interface.
type DevlxdIdentities interface {
	CreateDevlxdIdentity(ctx context.Context, name string, instances []string, by string) (*auth.Identity, error)
	DeleteDevlxdIdentity(ctx context.Context, name string) error
	IssueDevlxdToken(ctx context.Context, name string, expiry time.Duration) (string, *time.Time, error)
	RevokeDevlxdToken(ctx context.Context, name string) error
}

var _ DevlxdIdentities = (*auth.Service)(nil)

// registerDevlxdIdentities adds the devlxd identity routes to v1.
func (a *API) registerDevlxdIdentities(v1 fiber.Router) {
	with := func(h func(*request, DevlxdIdentities) (any, error)) handler {
		return httpwrap.With(a.devlxdIdentities, h)
	}
	id := identityNameParam
	v1.Post("/auth/identities/devlxd", a.adminOnly, a.created(with(a.createDevlxdIdentity)))
	v1.Delete("/auth/identities/devlxd/:name", a.adminOnly, a.ok(with(a.deleteDevlxdIdentity), id))
	v1.Post("/auth/identities/devlxd/:name/token", a.adminOnly, a.created(with(a.issueDevlxdToken), id))
	v1.Delete("/auth/identities/devlxd/:name/token", a.adminOnly, a.ok(with(a.revokeDevlxdToken), id))
}

// devlxdIdentities returns the service or a 501.
func (a *API) devlxdIdentities() (DevlxdIdentities, error) {
	svc, err := a.authService()
	if err != nil {
		return nil, err
	}
	d, ok := svc.(DevlxdIdentities)
	if !ok {
		return nil, fmt.Errorf("devlxd identities are not supported by this daemon's authentication service: %w", errdefs.ErrNotSupported)
	}
	return d, nil
}

// createDevlxdIdentity answers POST /1.0/auth/identities/devlxd with 201.
func (a *API) createDevlxdIdentity(r *request, svc DevlxdIdentities) (any, error) {
	var req api.IdentitiesDevlxdPost
	if err := decodeBody(r.Ctx, &req); err != nil {
		return nil, err
	}
	id, err := svc.CreateDevlxdIdentity(r.UserContext(), req.Name, req.Instances, requestor(r.Ctx).Describe())
	if err != nil {
		return nil, err
	}
	a.log.Info("devlxd identity created", "identity", id.ID, "instances", id.Instances, "by", requestor(r.Ctx).Describe())
	return wireIdentity(*id), nil
}

// deleteDevlxdIdentity answers DELETE /1.0/auth/identities/devlxd/{name}.
func (a *API) deleteDevlxdIdentity(r *request, svc DevlxdIdentities) (any, error) {
	name := r.Param("name")
	return a.logged(r, svc.DeleteDevlxdIdentity(r.UserContext(), name), "devlxd identity deleted", "identity", "devlxd/"+name)
}

// issueDevlxdToken answers POST /1.0/auth/identities/devlxd/{name}/token
// with 201 and the new token.
func (a *API) issueDevlxdToken(r *request, svc DevlxdIdentities) (any, error) {
	return a.newToken(r, "devlxd", auth.ParseDevlxdExpiry, svc.IssueDevlxdToken)
}

// revokeDevlxdToken answers DELETE /1.0/auth/identities/devlxd/{name}/token.
func (a *API) revokeDevlxdToken(r *request, svc DevlxdIdentities) (any, error) {
	name := r.Param("name")
	return a.logged(r, svc.RevokeDevlxdToken(r.UserContext(), name), "devlxd token revoked", "identity", "devlxd/"+name)
}
