package adminapi

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// registerAuth adds the trust-store, identity and session routes to v1:
// an admin's only.
func (a *API) registerAuth(v1 fiber.Router) {
	withAuth := func(h func(*request, Authenticator) (any, error)) handler { return httpwrap.With(a.authService, h) }
	fp := certificateParam
	v1.Get("/certificates", a.adminOnly, a.ok(withAuth(a.listCertificates)))
	v1.Post("/certificates", a.adminOnly, a.created(withAuth(withBody(a.addCertificate))))
	v1.Get("/certificates/:fingerprint", a.adminOnly, a.ok(withAuth(a.getCertificate), fp))
	v1.Delete("/certificates/:fingerprint", a.adminOnly, a.ok(withAuth(a.deleteCertificate), fp))
	v1.Get("/auth/identities", a.adminOnly, a.ok(withAuth(a.listIdentities)))
	v1.Post("/auth/identities/bearer", a.adminOnly, a.created(withAuth(withBody(a.createIdentity))))
	a.registerIdentity(v1, auth.TypeBearer, a.bearerIdentities)
	a.registerDevlxdIdentities(v1)
	v1.Post("/auth/dashboard-logins", a.adminOnly, a.created(withAuth(a.dashboardLogin)))
	v1.Get("/auth/sessions", a.adminOnly, a.ok(withAuth(a.listSessions)))
	v1.Delete("/auth/sessions/:id", a.adminOnly, a.ok(withAuth(a.deleteSession), sessionIDParam))
}

// authService returns the Authenticator or a 501 when the daemon runs
// without one.
func (a *API) authService() (Authenticator, error) {
	if a.cfg.Auth == nil {
		return nil, fmt.Errorf("authentication is not configured on this daemon: %w", errdefs.ErrNotSupported)
	}
	return a.cfg.Auth, nil
}

// decodeOptionalBody is decodeBody that accepts an empty body (v is left
// alone then).
func decodeOptionalBody(c *fiber.Ctx, v any) error {
	if len(strings.TrimSpace(string(c.Body()))) == 0 {
		return nil
	}
	return decodeBody(c, v)
}

func wireCertificate(c auth.Certificate) api.Certificate {
	return api.Certificate{Name: c.Name, Type: "client", Fingerprint: c.Fingerprint, Certificate: c.Certificate, AddedAt: c.AddedAt, AddedBy: c.AddedBy, Role: c.Role}
}

// listCertificates answers GET /1.0/certificates.
func (a *API) listCertificates(r *request, svc Authenticator) (any, error) {
	return wiredEach(wireCertificate)(svc.Certificates(r.UserContext()))
}

// certificatePEM returns a POSTed certificate as PEM: PEM stays, base64 of
// a DER (LXD's form) is wrapped.
func certificatePEM(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, badRequest("invalid certificate: empty; send the PEM (or base64 DER) of a client certificate")
	}
	if strings.HasPrefix(s, "-----BEGIN") {
		return []byte(s + "\n"), nil
	}
	der, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, badRequest("invalid certificate: neither PEM nor base64 DER")
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// addCertificate answers POST /1.0/certificates with 201 and the certificate.
func (a *API) addCertificate(r *request, svc Authenticator, req *api.CertificatesPost) (any, error) {
	if req.Type != "" && req.Type != "client" {
		return nil, badRequest("invalid certificate type %q: only client certificates are trusted", req.Type)
	}
	data, err := certificatePEM(req.Certificate)
	if err != nil {
		return nil, err
	}
	cert, err := svc.AddCertificate(r.UserContext(), req.Name, data, requestor(r.Ctx).Describe(), req.Role)
	if err != nil {
		return nil, err
	}
	a.log.Info("certificate trusted", "name", cert.Name, "fingerprint", cert.Fingerprint, "by", requestor(r.Ctx).Describe())
	return wireCertificate(*cert), nil
}

// getCertificate answers GET /1.0/certificates/{fingerprint}.
func (a *API) getCertificate(r *request, svc Authenticator) (any, error) {
	cert, err := svc.Certificate(r.UserContext(), r.Param("fingerprint"))
	if err != nil {
		return nil, err
	}
	return wireCertificate(*cert), nil
}

// deleteCertificate answers DELETE /1.0/certificates/{fingerprint}.
func (a *API) deleteCertificate(r *request, svc Authenticator) (any, error) {
	fp := r.Param("fingerprint")
	return a.logged(r, svc.RemoveCertificate(r.UserContext(), fp), "certificate removed", "fingerprint", fp)
}

// logged answers a change that returns no value: err, or nil after
// logging msg with args and who asked.
func (a *API) logged(r *request, err error, msg string, args ...any) (any, error) {
	if err != nil {
		return nil, err
	}
	a.log.Info(msg, append(args, "by", requestor(r.Ctx).Describe())...)
	return nil, nil
}

func wireIdentity(x auth.Identity) api.Identity {
	return api.Identity{Type: x.Type, Name: x.Name, ID: x.ID, CreatedAt: x.CreatedAt, CreatedBy: x.CreatedBy,
		Instances: x.Instances, Role: x.Role, HasToken: x.HasToken, TokenIssuedAt: x.TokenIssuedAt, TokenExpiresAt: x.TokenExpiresAt}
}

// listIdentities answers GET /1.0/auth/identities.
func (a *API) listIdentities(r *request, svc Authenticator) (any, error) {
	return wiredEach(wireIdentity)(svc.Identities(r.UserContext()))
}

// createIdentity answers POST /1.0/auth/identities/bearer with 201.
func (a *API) createIdentity(r *request, svc Authenticator, req *api.IdentitiesBearerPost) (any, error) {
	id, err := svc.CreateIdentity(r.UserContext(), req.Name, requestor(r.Ctx).Describe(), req.Role)
	return a.identityCreated(r, id, err)
}

// identityCreated answers a new identity (logged with who asked), or the
// error of making it.
func (a *API) identityCreated(r *request, id *auth.Identity, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	a.log.Info(id.Type+" identity created", "identity", id.ID, "instances", id.Instances, "by", requestor(r.Ctx).Describe())
	return wireIdentity(*id), nil
}

// identityService is what the routes of one type of identity (bearer,
// devlxd) do with an identity called name: Type is the type's name in the
// routes and IDs; ParseExpiry reads a token request's expiry.
type identityService struct {
	Type        string
	ParseExpiry func(string) (time.Duration, error)
	Delete      func(ctx context.Context, name string) error
	Issue       func(ctx context.Context, name string, expiry time.Duration) (string, *time.Time, error)
	Revoke      func(ctx context.Context, name string) error
}

// bearerIdentities returns the bearer identities' service, or a 501.
func (a *API) bearerIdentities() (identityService, error) {
	svc, err := a.authService()
	if err != nil {
		return identityService{}, err
	}
	return identityService{Type: auth.TypeBearer, ParseExpiry: auth.ParseExpiry,
		Delete: svc.DeleteIdentity, Issue: svc.IssueToken, Revoke: svc.RevokeToken}, nil
}

// registerIdentity adds the routes of an identity of type typ to v1:
// DELETE /1.0/auth/identities/TYPE/{name}, and POST (201, a new token) and
// DELETE on its /token. get returns the type's service, or the error
// (501) its routes answer.
func (a *API) registerIdentity(v1 fiber.Router, typ string, get func() (identityService, error)) {
	path, id := "/auth/identities/"+typ+"/:name", identityNameParam
	v1.Delete(path, a.adminOnly, a.ok(httpwrap.With(get, a.deleteIdentity), id))
	v1.Post(path+"/token", a.adminOnly, a.created(httpwrap.With(get, a.issueToken), id))
	v1.Delete(path+"/token", a.adminOnly, a.ok(httpwrap.With(get, a.revokeToken), id))
}

// deleteIdentity answers DELETE /1.0/auth/identities/TYPE/{name}.
func (a *API) deleteIdentity(r *request, svc identityService) (any, error) {
	name := r.Param("name")
	return a.logged(r, svc.Delete(r.UserContext(), name), svc.Type+" identity deleted", "identity", svc.Type+"/"+name)
}

// issueToken answers POST /1.0/auth/identities/TYPE/{name}/token with 201
// and the new token (the body and its expiry are optional); the token is
// answered once, never cached.
func (a *API) issueToken(r *request, svc identityService) (any, error) {
	name := r.Param("name")
	var req api.TokenPost
	if err := decodeOptionalBody(r.Ctx, &req); err != nil {
		return nil, err
	}
	expiry, err := svc.ParseExpiry(req.Expiry)
	if err != nil {
		return nil, err
	}
	token, expires, err := svc.Issue(r.UserContext(), name, expiry)
	if err != nil {
		return nil, err
	}
	id := svc.Type + "/" + name
	a.log.Info(svc.Type+" token issued", "identity", id, "expires", expires, "by", requestor(r.Ctx).Describe())
	r.Set(fiber.HeaderCacheControl, "no-store")
	return api.Token{Identity: id, Token: token, ExpiresAt: expires}, nil
}

// revokeToken answers DELETE /1.0/auth/identities/TYPE/{name}/token.
func (a *API) revokeToken(r *request, svc identityService) (any, error) {
	name := r.Param("name")
	return a.logged(r, svc.Revoke(r.UserContext(), name), svc.Type+" token revoked", "identity", svc.Type+"/"+name)
}

// dashboardLogin answers POST /1.0/auth/dashboard-logins with 201 and a
// one-time login URL.
func (a *API) dashboardLogin(r *request, svc Authenticator) (any, error) {
	if err := decodeOptionalBody(r.Ctx, &struct{}{}); err != nil {
		return nil, err
	}
	base := ""
	if a.cfg.DashboardURL != nil {
		base = a.cfg.DashboardURL()
	}
	if base == "" {
		return nil, fmt.Errorf("the dashboard is not served: start guestlinkd with --http or --https: %w", errdefs.ErrNotSupported)
	}
	token, expires, err := svc.NewLogin(r.UserContext(), requestor(r.Ctx).Describe())
	if err != nil {
		return nil, err
	}
	r.Set(fiber.HeaderCacheControl, "no-store")
	return api.DashboardLogin{URL: LoginURL(base, token), ExpiresAt: expires}, nil
}

// LoginURL returns the dashboard's one-time login URL for token under base
// ("http://127.0.0.1:8080").
func LoginURL(base, token string) string {
	return strings.TrimRight(base, "/") + "/login?token=" + url.QueryEscape(token)
}

// listSessions answers GET /1.0/auth/sessions.
func (a *API) listSessions(r *request, svc Authenticator) (any, error) {
	return wiredEach(func(x auth.Session) api.Session {
		return api.Session{ID: x.ID, Name: x.Name, CreatedAt: x.CreatedAt, ExpiresAt: x.ExpiresAt, CreatedBy: x.CreatedBy}
	})(svc.Sessions(r.UserContext()))
}

// deleteSession answers DELETE /1.0/auth/sessions/{id}.
func (a *API) deleteSession(r *request, svc Authenticator) (any, error) {
	id := r.Param("id")
	return a.logged(r, svc.RevokeSession(r.UserContext(), id), "dashboard session revoked", "session", id)
}
