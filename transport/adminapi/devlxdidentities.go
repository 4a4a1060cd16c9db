package adminapi

import (
	"context"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
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
	v1.Post("/auth/identities/devlxd", a.adminOnly, a.createDevlxdIdentity)
	v1.Delete("/auth/identities/devlxd/:name", a.adminOnly, a.deleteDevlxdIdentity)
	v1.Post("/auth/identities/devlxd/:name/token", a.adminOnly, a.issueDevlxdToken)
	v1.Delete("/auth/identities/devlxd/:name/token", a.adminOnly, a.revokeDevlxdToken)
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
func (a *API) createDevlxdIdentity(c *fiber.Ctx) error {
	svc, err := a.devlxdIdentities()
	if err != nil {
		return err
	}
	var req api.IdentitiesDevlxdPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	id, err := svc.CreateDevlxdIdentity(c.UserContext(), req.Name, req.Instances, requestor(c).Describe())
	if err != nil {
		return err
	}
	a.log.Info("devlxd identity created", "identity", id.ID, "instances", id.Instances, "by", requestor(c).Describe())
	return syncCreated(c, wireIdentity(*id))
}

// deleteDevlxdIdentity answers DELETE /1.0/auth/identities/devlxd/{name}.
func (a *API) deleteDevlxdIdentity(c *fiber.Ctx) error {
	svc, err := a.devlxdIdentities()
	if err != nil {
		return err
	}
	name, err := identityName(c)
	if err != nil {
		return err
	}
	if err := svc.DeleteDevlxdIdentity(c.UserContext(), name); err != nil {
		return err
	}
	a.log.Info("devlxd identity deleted", "identity", "devlxd/"+name, "by", requestor(c).Describe())
	return sync200(c, nil)
}

// issueDevlxdToken answers POST /1.0/auth/identities/devlxd/{name}/token
// with 201 and the new token.
func (a *API) issueDevlxdToken(c *fiber.Ctx) error {
	svc, err := a.devlxdIdentities()
	if err != nil {
		return err
	}
	name, err := identityName(c)
	if err != nil {
		return err
	}
	var req api.TokenPost
	if err := decodeOptionalBody(c, &req); err != nil {
		return err
	}
	expiry, err := auth.ParseDevlxdExpiry(req.Expiry)
	if err != nil {
		return err
	}
	token, expires, err := svc.IssueDevlxdToken(c.UserContext(), name, expiry)
	if err != nil {
		return err
	}
	a.log.Info("devlxd token issued", "identity", "devlxd/"+name, "expires", expires, "by", requestor(c).Describe())
	c.Set(fiber.HeaderCacheControl, "no-store")
	return syncCreated(c, api.Token{Identity: "devlxd/" + name, Token: token, ExpiresAt: expires})
}

// revokeDevlxdToken answers DELETE /1.0/auth/identities/devlxd/{name}/token.
func (a *API) revokeDevlxdToken(c *fiber.Ctx) error {
	svc, err := a.devlxdIdentities()
	if err != nil {
		return err
	}
	name, err := identityName(c)
	if err != nil {
		return err
	}
	if err := svc.RevokeDevlxdToken(c.UserContext(), name); err != nil {
		return err
	}
	a.log.Info("devlxd token revoked", "identity", "devlxd/"+name, "by", requestor(c).Describe())
	return sync200(c, nil)
}
