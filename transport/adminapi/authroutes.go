package adminapi

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
)

// registerAuth adds the trust-store, identity and session routes to v1:
// an admin's only.
func (a *API) registerAuth(v1 fiber.Router) {
	v1.Get("/certificates", a.adminOnly, a.listCertificates)
	v1.Post("/certificates", a.adminOnly, a.addCertificate)
	v1.Get("/certificates/:fingerprint", a.adminOnly, a.getCertificate)
	v1.Delete("/certificates/:fingerprint", a.adminOnly, a.deleteCertificate)
	v1.Get("/auth/identities", a.adminOnly, a.listIdentities)
	v1.Post("/auth/identities/bearer", a.adminOnly, a.createIdentity)
	v1.Delete("/auth/identities/bearer/:name", a.adminOnly, a.deleteIdentity)
	v1.Post("/auth/identities/bearer/:name/token", a.adminOnly, a.issueToken)
	v1.Delete("/auth/identities/bearer/:name/token", a.adminOnly, a.revokeToken)
	a.registerDevlxdIdentities(v1)
	v1.Post("/auth/dashboard-logins", a.adminOnly, a.dashboardLogin)
	v1.Get("/auth/sessions", a.adminOnly, a.listSessions)
	v1.Delete("/auth/sessions/:id", a.adminOnly, a.deleteSession)
}

// authService returns the Authenticator or a 501 when the daemon runs
// without one.
func (a *API) authService() (Authenticator, error) {
	if a.cfg.Auth == nil {
		return nil, fmt.Errorf("authentication is not configured on this daemon: %w", errdefs.ErrNotSupported)
	}
	return a.cfg.Auth, nil
}

// pathParam returns a path parameter, unescaped.
func pathParam(c *fiber.Ctx, key, what string) (string, error) {
	raw := c.Params(key)
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("invalid %s %q: bad escape", what, raw)
	}
	return v, nil
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
func (a *API) listCertificates(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	list, err := svc.Certificates(c.UserContext())
	if err != nil {
		return err
	}
	out := make([]api.Certificate, 0, len(list))
	for _, x := range list {
		out = append(out, wireCertificate(x))
	}
	return sync200(c, out)
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
func (a *API) addCertificate(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	var req api.CertificatesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Type != "" && req.Type != "client" {
		return badRequest("invalid certificate type %q: only client certificates are trusted", req.Type)
	}
	data, err := certificatePEM(req.Certificate)
	if err != nil {
		return err
	}
	cert, err := svc.AddCertificate(c.UserContext(), req.Name, data, requestor(c).Describe(), req.Role)
	if err != nil {
		return err
	}
	a.log.Info("certificate trusted", "name", cert.Name, "fingerprint", cert.Fingerprint, "by", requestor(c).Describe())
	return syncCreated(c, wireCertificate(*cert))
}

// getCertificate answers GET /1.0/certificates/{fingerprint}.
func (a *API) getCertificate(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	fp, err := pathParam(c, "fingerprint", "fingerprint")
	if err != nil {
		return err
	}
	cert, err := svc.Certificate(c.UserContext(), fp)
	if err != nil {
		return err
	}
	return sync200(c, wireCertificate(*cert))
}

// deleteCertificate answers DELETE /1.0/certificates/{fingerprint}.
func (a *API) deleteCertificate(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	fp, err := pathParam(c, "fingerprint", "fingerprint")
	if err != nil {
		return err
	}
	if err := svc.RemoveCertificate(c.UserContext(), fp); err != nil {
		return err
	}
	a.log.Info("certificate removed", "fingerprint", fp, "by", requestor(c).Describe())
	return sync200(c, nil)
}

func wireIdentity(x auth.Identity) api.Identity {
	return api.Identity{Type: x.Type, Name: x.Name, ID: x.ID, CreatedAt: x.CreatedAt, CreatedBy: x.CreatedBy,
		Instances: x.Instances, Role: x.Role, HasToken: x.HasToken, TokenIssuedAt: x.TokenIssuedAt, TokenExpiresAt: x.TokenExpiresAt}
}

// listIdentities answers GET /1.0/auth/identities.
func (a *API) listIdentities(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	list, err := svc.Identities(c.UserContext())
	if err != nil {
		return err
	}
	out := make([]api.Identity, 0, len(list))
	for _, x := range list {
		out = append(out, wireIdentity(x))
	}
	return sync200(c, out)
}

// createIdentity answers POST /1.0/auth/identities/bearer with 201.
func (a *API) createIdentity(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	var req api.IdentitiesBearerPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	id, err := svc.CreateIdentity(c.UserContext(), req.Name, requestor(c).Describe(), req.Role)
	if err != nil {
		return err
	}
	a.log.Info("bearer identity created", "identity", id.ID, "by", requestor(c).Describe())
	return syncCreated(c, wireIdentity(*id))
}

// identityName returns the :name of a bearer identity route, validated.
func identityName(c *fiber.Ctx) (string, error) {
	name, err := pathParam(c, "name", "identity name")
	if err != nil {
		return "", err
	}
	return name, auth.ValidateName(name)
}

// deleteIdentity answers DELETE /1.0/auth/identities/bearer/{name}.
func (a *API) deleteIdentity(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	name, err := identityName(c)
	if err != nil {
		return err
	}
	if err := svc.DeleteIdentity(c.UserContext(), name); err != nil {
		return err
	}
	a.log.Info("bearer identity deleted", "identity", "bearer/"+name, "by", requestor(c).Describe())
	return sync200(c, nil)
}

// issueToken answers POST /1.0/auth/identities/bearer/{name}/token with 201
// and the new token (the body and its expiry are optional).
func (a *API) issueToken(c *fiber.Ctx) error {
	svc, err := a.authService()
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
	expiry, err := auth.ParseExpiry(req.Expiry)
	if err != nil {
		return err
	}
	token, expires, err := svc.IssueToken(c.UserContext(), name, expiry)
	if err != nil {
		return err
	}
	a.log.Info("bearer token issued", "identity", "bearer/"+name, "expires", expires, "by", requestor(c).Describe())
	c.Set(fiber.HeaderCacheControl, "no-store")
	return syncCreated(c, api.Token{Identity: "bearer/" + name, Token: token, ExpiresAt: expires})
}

// revokeToken answers DELETE /1.0/auth/identities/bearer/{name}/token.
func (a *API) revokeToken(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	name, err := identityName(c)
	if err != nil {
		return err
	}
	if err := svc.RevokeToken(c.UserContext(), name); err != nil {
		return err
	}
	a.log.Info("bearer token revoked", "identity", "bearer/"+name, "by", requestor(c).Describe())
	return sync200(c, nil)
}

// dashboardLogin answers POST /1.0/auth/dashboard-logins with 201 and a
// one-time login URL.
func (a *API) dashboardLogin(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	if err := decodeOptionalBody(c, &struct{}{}); err != nil {
		return err
	}
	base := ""
	if a.cfg.DashboardURL != nil {
		base = a.cfg.DashboardURL()
	}
	if base == "" {
		return fmt.Errorf("the dashboard is not served: start guestlinkd with --http or --https: %w", errdefs.ErrNotSupported)
	}
	token, expires, err := svc.NewLogin(c.UserContext(), requestor(c).Describe())
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return syncCreated(c, api.DashboardLogin{URL: LoginURL(base, token), ExpiresAt: expires})
}

// LoginURL returns the dashboard's one-time login URL for token under base
// ("http://127.0.0.1:8080").
func LoginURL(base, token string) string {
	return strings.TrimRight(base, "/") + "/login?token=" + url.QueryEscape(token)
}

// listSessions answers GET /1.0/auth/sessions.
func (a *API) listSessions(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	list, err := svc.Sessions(c.UserContext())
	if err != nil {
		return err
	}
	out := make([]api.Session, 0, len(list))
	for _, x := range list {
		out = append(out, api.Session{ID: x.ID, Name: x.Name, CreatedAt: x.CreatedAt, ExpiresAt: x.ExpiresAt, CreatedBy: x.CreatedBy})
	}
	return sync200(c, out)
}

// deleteSession answers DELETE /1.0/auth/sessions/{id}.
func (a *API) deleteSession(c *fiber.Ctx) error {
	svc, err := a.authService()
	if err != nil {
		return err
	}
	id, err := pathParam(c, "id", "session id")
	if err != nil {
		return err
	}
	if err := svc.RevokeSession(c.UserContext(), id); err != nil {
		return err
	}
	a.log.Info("dashboard session revoked", "session", id, "by", requestor(c).Describe())
	return sync200(c, nil)
}
