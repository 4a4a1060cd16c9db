package adminapi

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
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
	v1.Post("/auth/identities/devlxd", a.adminOnly, a.created(httpwrap.With(a.devlxdIdentities, withBody(a.createDevlxdIdentity))))
	a.registerIdentity(v1, auth.TypeDevlxd, func() (identityService, error) {
		svc, err := a.devlxdIdentities()
		if err != nil {
			return identityService{}, err
		}
		return identityService{Type: auth.TypeDevlxd, ParseExpiry: auth.ParseDevlxdExpiry,
			Delete: svc.DeleteDevlxdIdentity, Issue: svc.IssueDevlxdToken, Revoke: svc.RevokeDevlxdToken}, nil
	})
}

// devlxdIdentities returns the service or a 501.
func (a *API) devlxdIdentities() (DevlxdIdentities, error) {
	svc, err := a.authService()
	if err != nil {
		return nil, err
	}
	return optional[DevlxdIdentities](svc, "devlxd identities are not supported by this daemon's authentication service")
}

// createDevlxdIdentity answers POST /1.0/auth/identities/devlxd with 201.
func (a *API) createDevlxdIdentity(r *request, svc DevlxdIdentities, req *api.IdentitiesDevlxdPost) (any, error) {
	id, err := svc.CreateDevlxdIdentity(r.UserContext(), req.Name, req.Instances, requestor(r.Ctx).Describe())
	return a.identityCreated(r, id, err)
}
