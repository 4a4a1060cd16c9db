package adminapi

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/errdefs"
)

// Authenticator is the authentication service of the API's TCP listeners
// and of the /1.0/certificates and /1.0/auth routes (core/auth.Service).
// Authenticate* return errors wrapping errdefs.ErrUnauthorized for
// credentials that do not authenticate; the others return the usual
// errdefs kinds (ErrInvalid, ErrNotFound, ErrAlreadyExists, ErrConflict).
type Authenticator interface {
	AuthenticateCertificate(ctx context.Context, cert *x509.Certificate) (*auth.Certificate, error)
	AuthenticateToken(ctx context.Context, token string) (*auth.Identity, error)

	AddCertificate(ctx context.Context, name string, pemData []byte, by, role string) (*auth.Certificate, error)
	Certificates(ctx context.Context) ([]auth.Certificate, error)
	Certificate(ctx context.Context, fingerprint string) (*auth.Certificate, error)
	RemoveCertificate(ctx context.Context, fingerprint string) error

	CreateIdentity(ctx context.Context, name, by, role string) (*auth.Identity, error)
	Identities(ctx context.Context) ([]auth.Identity, error)
	DeleteIdentity(ctx context.Context, name string) error
	IssueToken(ctx context.Context, name string, expiry time.Duration) (string, *time.Time, error)
	RevokeToken(ctx context.Context, name string) error

	NewLogin(ctx context.Context, by string) (string, time.Time, error)
	Sessions(ctx context.Context) ([]auth.Session, error)
	RevokeSession(ctx context.Context, id string) error
}

var _ Authenticator = (*auth.Service)(nil)

// Locals keys of an authenticated TCP request: the requestor, and a
// function that checks its credentials again (for long event streams).
const (
	requestorKey = "guestlink.requestor"
	roleKey      = "guestlink.role" // auth.RoleAdmin or auth.RoleViewer; unset on the admin socket and for members
	recheckKey   = "guestlink.recheck"
)

// recheckFunc checks a TCP request's credentials again; it returns an error
// wrapping errdefs.ErrUnauthorized once they were revoked or expired.
type recheckFunc func(ctx context.Context) error

// authHelp is the end of every 401 message on TCP.
const authHelp = "present a trusted client certificate over https (guestlink remote add) or an Authorization: Bearer token (guestlink auth identity token issue)"

// authenticate is the /1.0 middleware that says who sends the request: on
// the Unix socket the peer (SO_PEERCRED); on TCP a trusted TLS client
// certificate or a bearer token, else 401. Nothing of the request is used
// before it passes (the websocket upgrade included).
func (a *API) authenticate(c *fiber.Ctx) error {
	conn := c.Context().Conn()
	if conn != nil {
		if _, ok := unwrapUnix(conn); ok {
			// The socket's mode is the access control; the peer's
			// credentials are read only by handlers that record a change.
			return c.Next()
		}
	}
	if member, ok := a.clusterPeer(c); ok {
		// A cluster member: for itself, or forwarding someone's request
		// (who was authenticated by that member).
		c.Locals(requestorKey, peerRequestor(c, member))
		return c.Next()
	}
	by, role, recheck, err := a.authenticateTCP(c)
	if err != nil {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="guestlink"`)
		return err
	}
	if role == auth.RoleViewer && c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
		return fmt.Errorf("%s has the role viewer: it may read, not %s %s (an admin identity may: --role admin): %w",
			by.Describe(), c.Method(), c.Path(), errdefs.ErrForbidden)
	}
	c.Locals(requestorKey, by)
	c.Locals(roleKey, role)
	c.Locals(recheckKey, recheck)
	return c.Next()
}

// adminOnly refuses a viewer the routes it is on (the trust store,
// identities and sessions: who may do what is an admin's business, reading
// it included).
func (a *API) adminOnly(c *fiber.Ctx) error {
	if err := refuseViewer(c); err != nil {
		return err
	}
	return c.Next()
}

// refuseViewer returns adminOnly's error for a viewer's request, else nil.
func refuseViewer(c *fiber.Ctx) error {
	if role, _ := c.Locals(roleKey).(string); role == auth.RoleViewer {
		return fmt.Errorf("%s has the role viewer: %s %s is an admin's (an admin identity may: --role admin): %w",
			requestor(c).Describe(), c.Method(), c.Path(), errdefs.ErrForbidden)
	}
	return nil
}

// authenticateTCP checks a TCP request's credentials and returns who sent
// it, its role and how to check the same credentials again later.
func (a *API) authenticateTCP(c *fiber.Ctx) (events.Requestor, string, recheckFunc, error) {
	addr := ""
	if ra := c.Context().RemoteAddr(); ra != nil {
		addr = ra.String()
	}
	svc := a.cfg.Auth
	if svc == nil {
		return events.Requestor{}, "", nil, fiber.NewError(http.StatusUnauthorized, "authentication is not available on this listener: use the admin socket")
	}
	ctx := c.UserContext()
	var certErr error
	if cs := c.Context().TLSConnectionState(); cs != nil && len(cs.PeerCertificates) > 0 {
		peer := cs.PeerCertificates[0]
		cert, err := svc.AuthenticateCertificate(ctx, peer)
		if err == nil {
			recheck := func(ctx context.Context) error {
				_, err := svc.AuthenticateCertificate(ctx, peer)
				return err
			}
			return events.Requestor{Username: cert.Name, Protocol: ProtocolTLS, Address: addr, Fingerprint: cert.Fingerprint}, cert.Role, recheck, nil
		}
		certErr = err
	}
	if h := c.Get(fiber.HeaderAuthorization); h != "" {
		scheme, token, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return events.Requestor{}, "", nil, fiber.NewError(http.StatusUnauthorized,
				fmt.Sprintf("authorization scheme %q is not supported: send Authorization: Bearer TOKEN", scheme))
		}
		token = strings.TrimSpace(token)
		id, err := svc.AuthenticateToken(ctx, token)
		if err != nil {
			return events.Requestor{}, "", nil, err
		}
		recheck := func(ctx context.Context) error {
			_, err := svc.AuthenticateToken(ctx, token)
			return err
		}
		return events.Requestor{Username: id.ID, Protocol: ProtocolBearer, Address: addr}, id.Role, recheck, nil
	}
	if certErr != nil {
		return events.Requestor{}, "", nil, fmt.Errorf("%w; %s", certErr, authHelp)
	}
	return events.Requestor{}, "", nil, fmt.Errorf("%w: authentication required: %s", errdefs.ErrUnauthorized, authHelp)
}

// hostAllowed reports whether host (the Host header without its port) may
// be served on a connection to local IP la: localhost, the listener's own
// IP (any loopback IP on a loopback listener), or a name of extra.
func hostAllowed(host string, la net.IP, extra []string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.Equal(la) || (la.IsLoopback() && ip.IsLoopback())
	}
	for _, n := range extra {
		if strings.EqualFold(host, n) {
			return true
		}
	}
	return false
}
