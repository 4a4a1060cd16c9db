package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// Certificates lists the trusted client certificates.
func (c *Client) Certificates(ctx context.Context) ([]api.Certificate, error) {
	var list []api.Certificate
	if err := c.do(ctx, http.MethodGet, "/1.0/certificates", nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// AddCertificate trusts a client certificate (PEM); name may be empty.
func (c *Client) AddCertificate(ctx context.Context, name string, pemData []byte) (*api.Certificate, error) {
	return c.TrustCertificate(ctx, api.CertificatesPost{Name: name, Type: "client", Certificate: string(pemData)})
}

// TrustCertificate sends POST /1.0/certificates with req (its Role: admin
// by default, or api.RoleViewer) and returns the trusted certificate.
func (c *Client) TrustCertificate(ctx context.Context, req api.CertificatesPost) (*api.Certificate, error) {
	var out api.Certificate
	if err := c.do(ctx, http.MethodPost, "/1.0/certificates", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Certificate returns one trusted certificate.
func (c *Client) Certificate(ctx context.Context, fingerprint string) (*api.Certificate, error) {
	var out api.Certificate
	if err := c.do(ctx, http.MethodGet, "/1.0/certificates/"+url.PathEscape(fingerprint), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveCertificate stops trusting a certificate.
func (c *Client) RemoveCertificate(ctx context.Context, fingerprint string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/certificates/"+url.PathEscape(fingerprint), nil, nil, nil)
}

// Identities lists the identities (trusted certificates and bearer identities).
func (c *Client) Identities(ctx context.Context) ([]api.Identity, error) {
	var list []api.Identity
	if err := c.do(ctx, http.MethodGet, "/1.0/auth/identities", nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// CreateBearerIdentity creates the identity bearer/name.
func (c *Client) CreateBearerIdentity(ctx context.Context, name string) (*api.Identity, error) {
	return c.CreateBearerIdentityWith(ctx, api.IdentitiesBearerPost{Name: name})
}

// CreateBearerIdentityWith creates the bearer identity req.Name with
// req.Role (admin by default, or api.RoleViewer).
func (c *Client) CreateBearerIdentityWith(ctx context.Context, req api.IdentitiesBearerPost) (*api.Identity, error) {
	var out api.Identity
	if err := c.do(ctx, http.MethodPost, "/1.0/auth/identities/bearer", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteBearerIdentity deletes the identity bearer/name.
func (c *Client) DeleteBearerIdentity(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/auth/identities/bearer/"+url.PathEscape(name), nil, nil, nil)
}

// IssueToken issues a new token for bearer/name (replacing its live one);
// expiry is a duration ("24h", "7d") or "" for none.
func (c *Client) IssueToken(ctx context.Context, name, expiry string) (*api.Token, error) {
	var out api.Token
	if err := c.do(ctx, http.MethodPost, "/1.0/auth/identities/bearer/"+url.PathEscape(name)+"/token", nil, api.TokenPost{Expiry: expiry}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeToken revokes bearer/name's token.
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/auth/identities/bearer/"+url.PathEscape(name)+"/token", nil, nil, nil)
}

// DashboardLogin asks for a one-time dashboard login URL.
func (c *Client) DashboardLogin(ctx context.Context) (*api.DashboardLogin, error) {
	var out api.DashboardLogin
	if err := c.do(ctx, http.MethodPost, "/1.0/auth/dashboard-logins", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Sessions lists the live dashboard sessions.
func (c *Client) Sessions(ctx context.Context) ([]api.Session, error) {
	var list []api.Session
	if err := c.do(ctx, http.MethodGet, "/1.0/auth/sessions", nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// RevokeSession ends a dashboard session by its listed id (or a prefix of
// at least 8 digits).
func (c *Client) RevokeSession(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/auth/sessions/"+url.PathEscape(id), nil, nil, nil)
}

// CreateDevlxdIdentity creates the identity devlxd/name, scoped to
// instances.
func (c *Client) CreateDevlxdIdentity(ctx context.Context, name string, instances []string) (*api.Identity, error) {
	var out api.Identity
	if err := c.do(ctx, http.MethodPost, "/1.0/auth/identities/devlxd", nil, api.IdentitiesDevlxdPost{Name: name, Instances: instances}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteDevlxdIdentity deletes the identity devlxd/name.
func (c *Client) DeleteDevlxdIdentity(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/auth/identities/devlxd/"+url.PathEscape(name), nil, nil, nil)
}

// IssueDevlxdToken issues a new token for devlxd/name (replacing its live
// one); expiry is a duration ("24h", "7d") or "" for none.
func (c *Client) IssueDevlxdToken(ctx context.Context, name, expiry string) (*api.Token, error) {
	var out api.Token
	if err := c.do(ctx, http.MethodPost, "/1.0/auth/identities/devlxd/"+url.PathEscape(name)+"/token", nil, api.TokenPost{Expiry: expiry}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeDevlxdToken revokes devlxd/name's token.
func (c *Client) RevokeDevlxdToken(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/1.0/auth/identities/devlxd/"+url.PathEscape(name)+"/token", nil, nil, nil)
}
