package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// TypeDevlxd is the identity type of devlxd identities: bearer identities
// of the devlxd API (a guest sends the token on /dev/lxd/sock), scoped to
// the instances they may act for. Their tokens carry PrefixDevlxd and are
// refused by the admin API, as admin bearer tokens are refused by devlxd.
const TypeDevlxd = "devlxd"

// PrefixDevlxd is the prefix of devlxd tokens.
const PrefixDevlxd = "gld_"

// Reasons a token of devlxd form is refused; AuthenticateDevlxd wraps one
// of them together with errdefs.ErrUnauthorized, so devlxd can answer each
// with LXD's words.
var (
	// ErrDevlxdTokenUnknown: no identity holds the token (never issued,
	// replaced by a newer one, revoked, or its identity deleted).
	ErrDevlxdTokenUnknown = errors.New("invalid devlxd token (unknown or revoked)")
	// ErrDevlxdTokenExpired: the token's expiry has passed.
	ErrDevlxdTokenExpired = errors.New("devlxd token expired")
)

// IsDevlxdToken reports whether token has the form of a devlxd token
// (PrefixDevlxd and the length of the tokens IssueDevlxdToken makes),
// without looking it up. devlxd checks only such values and serves any
// other bearer value (an admin API token, another service's token) as an
// untrusted caller, as LXD does with a bearer value that is not one of its
// devlxd tokens.
func IsDevlxdToken(token string) bool { return wellFormed(token, PrefixDevlxd) }

// DevlxdCaller is a devlxd identity that authenticated.
type DevlxdCaller struct {
	// Name is the identity's name (without "devlxd/").
	Name string
	// Instances are the instances it may act for.
	Instances []string
}

// devlxdStore returns the store of devlxd identities.
func (s *Service) devlxdStore() (DevlxdStore, error) {
	st, ok := s.store.(DevlxdStore)
	if !ok {
		return nil, fmt.Errorf("devlxd identities: the store does not keep them: %w", errdefs.ErrNotSupported)
	}
	return st, nil
}

func devlxdIdentityOf(d *DevlxdIdentity) Identity {
	return Identity{
		Type: TypeDevlxd, Name: d.Name, ID: TypeDevlxd + "/" + d.Name,
		CreatedAt: d.CreatedAt, CreatedBy: d.CreatedBy, Instances: scopeOf(d),
		HasToken: d.TokenHash != "", TokenIssuedAt: d.TokenIssuedAt, TokenExpiresAt: d.TokenExpiresAt,
	}
}

// scopeOf returns the instances d may act for (never nil).
func scopeOf(d *DevlxdIdentity) []string {
	if d.Instances == nil {
		return []string{}
	}
	return d.Instances
}

// CreateDevlxdIdentity creates the devlxd identity name, scoped to
// instances (at least one; each a valid instance name, duplicates
// dropped). The instances need not exist yet. It has no token until
// IssueDevlxdToken.
func (s *Service) CreateDevlxdIdentity(ctx context.Context, name string, instances []string, by string) (*Identity, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if len(instances) == 0 {
		return nil, fmt.Errorf("devlxd identity %s: at least one instance is required (--instance NAME): %w", name, errdefs.ErrInvalid)
	}
	scope := make([]string, 0, len(instances))
	for _, in := range instances {
		if err := validateName("instance name", in); err != nil {
			return nil, fmt.Errorf("devlxd identity %s: %w", name, err)
		}
		if !slices.Contains(scope, in) {
			scope = append(scope, in)
		}
	}
	st, err := s.devlxdStore()
	if err != nil {
		return nil, err
	}
	rec := &DevlxdIdentity{Name: name, Instances: scope, CreatedAt: s.now(), CreatedBy: by}
	if err := st.CreateDevlxdIdentity(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("identity devlxd/%s already exists: %w", name, errdefs.ErrAlreadyExists)
		}
		return nil, err
	}
	s.log.Info("devlxd identity created", "name", name, "instances", scope)
	out := devlxdIdentityOf(rec)
	return &out, nil
}

// DevlxdIdentities lists the devlxd identities.
func (s *Service) DevlxdIdentities(ctx context.Context) ([]Identity, error) {
	st, err := s.devlxdStore()
	if err != nil {
		return nil, err
	}
	list, err := st.DevlxdIdentities(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Identity, 0, len(list))
	for _, d := range list {
		out = append(out, devlxdIdentityOf(d))
	}
	return out, nil
}

// DeleteDevlxdIdentity deletes the devlxd identity name and its token.
func (s *Service) DeleteDevlxdIdentity(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	st, err := s.devlxdStore()
	if err != nil {
		return err
	}
	if err := st.DeleteDevlxdIdentity(ctx, name); err != nil {
		return err
	}
	s.log.Info("devlxd identity deleted", "name", name)
	return nil
}

// IssueDevlxdToken gives the devlxd identity name a new token, replacing
// any live one, and returns it: the only time it is seen in clear. expiry
// 0 means no expiry.
func (s *Service) IssueDevlxdToken(ctx context.Context, name string, expiry time.Duration) (string, *time.Time, error) {
	if err := ValidateName(name); err != nil {
		return "", nil, err
	}
	if expiry < 0 || expiry > MaxExpiry {
		return "", nil, fmt.Errorf("invalid expiry %v: %w", expiry, errdefs.ErrInvalid)
	}
	st, err := s.devlxdStore()
	if err != nil {
		return "", nil, err
	}
	token, err := newSecret(PrefixDevlxd)
	if err != nil {
		return "", nil, fmt.Errorf("issuing token for devlxd/%s: %w", name, err)
	}
	now := s.now()
	var expires *time.Time
	if expiry > 0 {
		t := now.Add(expiry)
		expires = &t
	}
	if err := st.SetDevlxdIdentityToken(ctx, name, Hash(token), &now, expires); err != nil {
		return "", nil, err
	}
	s.log.Info("devlxd token issued", "identity", "devlxd/"+name, "expires", expires)
	return token, expires, nil
}

// RevokeDevlxdToken revokes the devlxd identity's token, if any.
func (s *Service) RevokeDevlxdToken(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	st, err := s.devlxdStore()
	if err != nil {
		return err
	}
	if err := st.SetDevlxdIdentityToken(ctx, name, "", nil, nil); err != nil {
		return err
	}
	s.log.Info("devlxd token revoked", "identity", "devlxd/"+name)
	return nil
}

// AuthenticateDevlxd checks a token a guest sent on /dev/lxd/sock on behalf
// of the instance caller (the instance the guest link belongs to). It
// returns the identity when the token is a live devlxd token AND caller is
// in its scope; otherwise an error wrapping errdefs.ErrUnauthorized
// (unknown, revoked, expired, an admin API token) or errdefs.ErrForbidden
// (a valid token of an identity not scoped to caller).
func (s *Service) AuthenticateDevlxd(ctx context.Context, token, caller string) (*DevlxdCaller, error) {
	if !wellFormed(token, PrefixDevlxd) {
		return nil, fmt.Errorf("not a devlxd token: %w: %w", ErrDevlxdTokenUnknown, errdefs.ErrUnauthorized)
	}
	st, err := s.devlxdStore()
	if err != nil {
		return nil, err
	}
	h := Hash(token)
	id, err := st.DevlxdIdentityByTokenHash(ctx, h)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrDevlxdTokenUnknown, errdefs.ErrUnauthorized)
	}
	if err != nil {
		return nil, fmt.Errorf("checking devlxd token: %w", err)
	}
	if !sameHash(id.TokenHash, h) {
		return nil, fmt.Errorf("%w: %w", ErrDevlxdTokenUnknown, errdefs.ErrUnauthorized)
	}
	if id.TokenExpiresAt != nil && !s.cfg.Now().Before(*id.TokenExpiresAt) {
		return nil, fmt.Errorf("token of devlxd/%s expired at %s: %w: %w", id.Name, id.TokenExpiresAt.Format(time.RFC3339), ErrDevlxdTokenExpired, errdefs.ErrUnauthorized)
	}
	scope := scopeOf(id)
	if !slices.Contains(scope, caller) {
		return nil, fmt.Errorf("identity devlxd/%s may not act for instance %q: %w", id.Name, caller, errdefs.ErrForbidden)
	}
	return &DevlxdCaller{Name: id.Name, Instances: scope}, nil
}
