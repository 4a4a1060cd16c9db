package auth

import (
	"context"
	"time"
)

// BearerIdentity is a named identity of the admin API that authenticates
// with a bearer token, as the Store keeps it: only the SHA-256 of its one
// live token.
type BearerIdentity struct {
	Name           string
	Role           string     // RoleAdmin or RoleViewer ("" in rows from before roles: RoleAdmin)
	TokenHash      string     // "" when no token is live
	TokenIssuedAt  *time.Time // nil when no token is live
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time
	CreatedBy      string
}

// DevlxdIdentity is a devlxd identity as the Store keeps it: a named
// bearer identity that a guest presents on /dev/lxd/sock to use the
// trusted devlxd management API, scoped to the instances it may act for.
// It is a separate kind from BearerIdentity: neither token works on the
// other's API. Only the SHA-256 of its one live token is kept.
type DevlxdIdentity struct {
	Name           string
	Instances      []string // instance names (DNS labels), in the order given
	TokenHash      string
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time
	CreatedBy      string
}

// LoginToken is a one-time dashboard login token as the Store keeps it:
// its SHA-256.
type LoginToken struct {
	Hash      string
	CreatedAt time.Time
	ExpiresAt time.Time
	CreatedBy string
}

// SessionRecord is a dashboard session as the Store keeps it: the SHA-256
// of its id, never the id (Session is how it is listed).
type SessionRecord struct {
	Hash      string
	CreatedAt time.Time
	ExpiresAt time.Time
	CreatedBy string // who issued the login token it came from
}

// Store keeps the admin API's authentication state: trusted client
// certificates, bearer identities, dashboard login tokens and sessions.
// Tokens and session ids reach it only as hashes. The daemon's database
// implements it. All methods are safe for concurrent use; a nil return
// means the change is durable. Errors are errdefs kinds: ErrNotFound,
// ErrAlreadyExists, ErrConflict, ErrInvalid.
type Store interface {
	// AddCertificate stores c; ErrAlreadyExists if its fingerprint is
	// already trusted.
	AddCertificate(ctx context.Context, c *Certificate) error
	// Certificate returns the certificate with this fingerprint (its Role
	// as stored: "" in rows from before roles).
	Certificate(ctx context.Context, fingerprint string) (*Certificate, error)
	// Certificates lists the trusted certificates by name, then fingerprint.
	Certificates(ctx context.Context) ([]*Certificate, error)
	// DeleteCertificate removes the certificate with this fingerprint.
	DeleteCertificate(ctx context.Context, fingerprint string) error

	// CreateIdentity stores a bearer identity; ErrAlreadyExists on a
	// duplicate name.
	CreateIdentity(ctx context.Context, id *BearerIdentity) error
	// Identity returns the bearer identity called name.
	Identity(ctx context.Context, name string) (*BearerIdentity, error)
	// IdentityByTokenHash returns the identity whose live token hashes to hash.
	IdentityByTokenHash(ctx context.Context, hash string) (*BearerIdentity, error)
	// Identities lists the bearer identities by name.
	Identities(ctx context.Context) ([]*BearerIdentity, error)
	// SetIdentityToken replaces the identity's token: hash "" revokes it.
	SetIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error
	// DeleteIdentity removes the bearer identity called name.
	DeleteIdentity(ctx context.Context, name string) error

	// CreateLoginToken stores a login token unless maxLive unexpired tokens
	// exist already at now (then ErrConflict).
	CreateLoginToken(ctx context.Context, t *LoginToken, now time.Time, maxLive int) error
	// RedeemLoginToken deletes the unexpired login token whose hash is
	// tokenHash and stores s in the same transaction, with s.CreatedBy set
	// to the token's; ErrNotFound if there is no such token (unknown, used
	// or expired at now).
	RedeemLoginToken(ctx context.Context, tokenHash string, now time.Time, s *SessionRecord) error
	// SessionByHash returns the session whose id hashes to hash.
	SessionByHash(ctx context.Context, hash string) (*SessionRecord, error)
	// Sessions lists the sessions unexpired at now, oldest first.
	Sessions(ctx context.Context, now time.Time) ([]*SessionRecord, error)
	// DeleteSessions deletes the sessions whose hash starts with prefix
	// (at least 8 characters) and returns how many there were; with
	// exact, only the session whose hash is prefix.
	DeleteSessions(ctx context.Context, prefix string, exact bool) (int, error)
	// PurgeAuth deletes the login tokens and sessions expired at now and
	// returns how many went.
	PurgeAuth(ctx context.Context, now time.Time) (int, error)
}

// DevlxdStore keeps the devlxd identities: a Store that also implements
// it (the daemon's database does) gives the Service devlxd identities.
type DevlxdStore interface {
	// CreateDevlxdIdentity stores id; ErrAlreadyExists on a duplicate name.
	CreateDevlxdIdentity(ctx context.Context, id *DevlxdIdentity) error
	// DevlxdIdentityByTokenHash returns the identity whose live token
	// hashes to hash.
	DevlxdIdentityByTokenHash(ctx context.Context, hash string) (*DevlxdIdentity, error)
	// DevlxdIdentities lists the devlxd identities by name.
	DevlxdIdentities(ctx context.Context) ([]*DevlxdIdentity, error)
	// SetDevlxdIdentityToken replaces the identity's token: hash ""
	// revokes it.
	SetDevlxdIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error
	// DeleteDevlxdIdentity removes the devlxd identity called name.
	DeleteDevlxdIdentity(ctx context.Context, name string) error
}
