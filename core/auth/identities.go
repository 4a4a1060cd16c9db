package auth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Identity types.
const (
	TypeTLS    = "tls"
	TypeBearer = "bearer"
)

// Roles of the admin API's identities.
const (
	// RoleAdmin may do everything the admin API offers.
	RoleAdmin = "admin"
	// RoleViewer may read (GET) instances, images, storage, backends,
	// cluster members, operations' state and events: nothing under
	// /1.0/auth or /1.0/certificates, and no change.
	RoleViewer = "viewer"
)

// ValidateRole checks a role name and returns it, RoleAdmin for "".
func ValidateRole(role string) (string, error) {
	switch role {
	case "", RoleAdmin:
		return RoleAdmin, nil
	case RoleViewer:
		return role, nil
	}
	return "", fmt.Errorf("invalid role %q: want %s or %s: %w", role, RoleAdmin, RoleViewer, errdefs.ErrInvalid)
}

// roleOf is a stored role, RoleAdmin for rows from before roles.
func roleOf(stored string) string {
	if stored == "" {
		return RoleAdmin
	}
	return stored
}

// MaxExpiry is the longest token expiry ParseExpiry accepts.
const MaxExpiry = 10 * 365 * 24 * time.Hour

// Identity is one identity: a trusted certificate of the admin API (type
// tls, id = fingerprint), a bearer identity of the admin API (type bearer,
// id = bearer/name) or a devlxd identity (type devlxd, id = devlxd/name).
// Tokens are never shown. The admin API answers it as api.Identity.
type Identity struct {
	Type           string
	Name           string
	ID             string
	CreatedAt      time.Time
	CreatedBy      string
	Instances      []string // devlxd identities: the instances they may act for
	Role           string   // tls and bearer identities: RoleAdmin or RoleViewer
	HasToken       bool
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time
}

// ParseExpiry parses a token expiry: a Go duration ("90m", "24h") or a
// number of days ("7d"), from one minute to MaxExpiry. "" means no expiry
// (0).
func ParseExpiry(s string) (time.Duration, error) { return parseExpiry(s, time.Minute) }

// MinDevlxdExpiry is the shortest devlxd token expiry: one second, LXD's
// (its expiry expressions count whole seconds, "30S"), so a test or a
// one-off job can have a token that is gone in seconds.
const MinDevlxdExpiry = time.Second

// ParseDevlxdExpiry is ParseExpiry for devlxd tokens: from
// MinDevlxdExpiry to MaxExpiry.
func ParseDevlxdExpiry(s string) (time.Duration, error) { return parseExpiry(s, MinDevlxdExpiry) }

func parseExpiry(s string, minimum time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("invalid expiry %q: want a duration such as 30m, 24h or 7d: %w", s, errdefs.ErrInvalid)
		}
		d = time.Duration(days) * 24 * time.Hour
		if days > int(MaxExpiry/(24*time.Hour)) {
			d = MaxExpiry + 1
		}
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid expiry %q: want a duration such as 30m, 24h or 7d: %w", s, errdefs.ErrInvalid)
		}
	}
	switch {
	case d < minimum:
		return 0, fmt.Errorf("invalid expiry %q: at least %s: %w", s, strings.TrimSuffix(minimum.String(), "0s"), errdefs.ErrInvalid)
	case d > MaxExpiry:
		return 0, fmt.Errorf("invalid expiry %q: at most %dd: %w", s, int(MaxExpiry/(24*time.Hour)), errdefs.ErrInvalid)
	}
	return d, nil
}

func identityOf(b *BearerIdentity) Identity {
	return Identity{
		Type: TypeBearer, Name: b.Name, ID: TypeBearer + "/" + b.Name, Role: roleOf(b.Role),
		CreatedAt: b.CreatedAt, CreatedBy: b.CreatedBy,
		HasToken: b.TokenHash != "", TokenIssuedAt: b.TokenIssuedAt, TokenExpiresAt: b.TokenExpiresAt,
	}
}

// CreateIdentity creates the bearer identity name (without a token) with
// role (RoleAdmin or RoleViewer; "" means RoleAdmin);
// errdefs.ErrAlreadyExists if it exists.
func (s *Service) CreateIdentity(ctx context.Context, name, by, role string) (*Identity, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	role, err := ValidateRole(role)
	if err != nil {
		return nil, err
	}
	rec := &BearerIdentity{Name: name, CreatedAt: s.now(), CreatedBy: by, Role: role}
	if err := s.store.CreateIdentity(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("identity bearer/%s already exists: %w", name, errdefs.ErrAlreadyExists)
		}
		return nil, err
	}
	out := identityOf(rec)
	return &out, nil
}

// Identities lists every identity: trusted certificates, then bearer
// identities.
func (s *Service) Identities(ctx context.Context) ([]Identity, error) {
	certs, err := s.store.Certificates(ctx)
	if err != nil {
		return nil, err
	}
	bearers, err := s.store.Identities(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Identity, 0, len(certs)+len(bearers))
	for _, c := range certs {
		out = append(out, Identity{Type: TypeTLS, Name: c.Name, ID: c.Fingerprint, CreatedAt: c.AddedAt, CreatedBy: c.AddedBy, Role: roleOf(c.Role)})
	}
	for _, b := range bearers {
		out = append(out, identityOf(b))
	}
	if _, ok := s.store.(DevlxdStore); ok {
		devlxd, err := s.DevlxdIdentities(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, devlxd...)
	}
	return out, nil
}

// DeleteIdentity deletes the bearer identity name and its token.
func (s *Service) DeleteIdentity(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := s.store.DeleteIdentity(ctx, name); err != nil {
		return err
	}
	s.log.Info("bearer identity deleted", "name", name)
	return nil
}

// IssueToken gives the bearer identity name a new token, replacing any
// live one, and returns it: the only time it is seen in clear. expiry 0
// means no expiry.
func (s *Service) IssueToken(ctx context.Context, name string, expiry time.Duration) (string, *time.Time, error) {
	if err := ValidateName(name); err != nil {
		return "", nil, err
	}
	if expiry < 0 || expiry > MaxExpiry {
		return "", nil, fmt.Errorf("invalid expiry %v: %w", expiry, errdefs.ErrInvalid)
	}
	token, err := newSecret(PrefixBearer)
	if err != nil {
		return "", nil, fmt.Errorf("issuing token for bearer/%s: %w", name, err)
	}
	now := s.now()
	var expires *time.Time
	if expiry > 0 {
		t := now.Add(expiry)
		expires = &t
	}
	if err := s.store.SetIdentityToken(ctx, name, Hash(token), &now, expires); err != nil {
		return "", nil, err
	}
	s.log.Info("bearer token issued", "identity", "bearer/"+name, "expires", expires)
	return token, expires, nil
}

// RevokeToken revokes the bearer identity's token, if any.
func (s *Service) RevokeToken(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := s.store.SetIdentityToken(ctx, name, "", nil, nil); err != nil {
		return err
	}
	s.log.Info("bearer token revoked", "identity", "bearer/"+name)
	return nil
}

// AuthenticateToken returns the bearer identity whose live token is token,
// or an error wrapping errdefs.ErrUnauthorized (unknown, revoked or expired
// token).
func (s *Service) AuthenticateToken(ctx context.Context, token string) (*Identity, error) {
	if !wellFormed(token, PrefixBearer) {
		return nil, unauthorized("invalid bearer token")
	}
	h := Hash(token)
	id, err := s.store.IdentityByTokenHash(ctx, h)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unauthorized("invalid bearer token (unknown or revoked)")
	}
	if err != nil {
		return nil, fmt.Errorf("checking bearer token: %w", err)
	}
	if !sameHash(id.TokenHash, h) {
		return nil, unauthorized("invalid bearer token (unknown or revoked)")
	}
	if id.TokenExpiresAt != nil && !s.cfg.Now().Before(*id.TokenExpiresAt) {
		return nil, unauthorized("bearer token of bearer/%s expired at %s", id.Name, id.TokenExpiresAt.Format(time.RFC3339))
	}
	out := identityOf(id)
	return &out, nil
}
