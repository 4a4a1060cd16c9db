package db

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/errdefs"
)

// AuthStore keeps the admin API's authentication state: trusted client
// certificates, bearer identities, dashboard login tokens and sessions.
// Tokens and session ids are stored only as hashes; the Store never sees
// them in clear. The Store returned by Open implements it. All methods are
// safe for concurrent use; a nil return means the change is durable.
type AuthStore interface {
	// AddCertificate stores c (sets c.ID); ErrAlreadyExists if its
	// fingerprint is already trusted.
	AddCertificate(ctx context.Context, c *TrustedCertificate) error
	// Certificate returns the certificate with this fingerprint.
	Certificate(ctx context.Context, fingerprint string) (*TrustedCertificate, error)
	// Certificates lists the trusted certificates by name, then fingerprint.
	Certificates(ctx context.Context) ([]*TrustedCertificate, error)
	// DeleteCertificate removes the certificate with this fingerprint.
	DeleteCertificate(ctx context.Context, fingerprint string) error

	// CreateIdentity stores a bearer identity (sets id.ID);
	// ErrAlreadyExists on a duplicate name.
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
	// tokenHash and stores s in the same transaction; ErrNotFound if there
	// is no such token (unknown, used or expired at now).
	RedeemLoginToken(ctx context.Context, tokenHash string, now time.Time, s *Session) error
	// SessionByHash returns the session whose id hashes to hash.
	SessionByHash(ctx context.Context, hash string) (*Session, error)
	// Sessions lists the sessions unexpired at now, oldest first.
	Sessions(ctx context.Context, now time.Time) ([]*Session, error)
	// DeleteSessions deletes the sessions whose hash starts with prefix
	// (at least 8 characters) and returns how many there were; with
	// exact, only the session whose hash is prefix.
	DeleteSessions(ctx context.Context, prefix string, exact bool) (int, error)
	// PurgeAuth deletes the login tokens and sessions expired at now and
	// returns how many rows went.
	PurgeAuth(ctx context.Context, now time.Time) (int, error)
}

var _ AuthStore = (*sqlStore)(nil)

// hashLen is the length of a hex SHA-256.
const hashLen = 64

// CreateLoginToken stores t unless maxLive live tokens exist.
func (s *sqlStore) CreateLoginToken(ctx context.Context, t *LoginToken, now time.Time, maxLive int) error {
	if t == nil || len(t.Hash) != hashLen {
		return fmt.Errorf("creating login token: a SHA-256 hash is required: %w", ErrInvalid)
	}
	t.CreatedAt, t.ExpiresAt = t.CreatedAt.UTC(), t.ExpiresAt.UTC()
	if err := checkColumns(column{"created by", t.CreatedBy, 255}); err != nil {
		return fmt.Errorf("creating login token: %w", err)
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		t.ID = 0
		var n int64
		if err := tx.Model(&LoginToken{}).Where("expires_at > ?", now.UTC()).Count(&n).Error; err != nil {
			return err
		}
		if maxLive > 0 && n >= int64(maxLive) {
			return fmt.Errorf("%d login tokens are live, the most allowed: %w", n, errdefs.ErrConflict)
		}
		return tx.Create(t).Error
	})
	if err != nil {
		t.ID = 0
		return fmt.Errorf("creating login token: %w", translate(err))
	}
	return nil
}

// RedeemLoginToken swaps a login token for a session in one transaction.
func (s *sqlStore) RedeemLoginToken(ctx context.Context, tokenHash string, now time.Time, sess *Session) error {
	if sess == nil || len(sess.Hash) != hashLen {
		return fmt.Errorf("redeeming login token: a session hash is required: %w", ErrInvalid)
	}
	sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		sess.ID = 0
		var t LoginToken
		if err := tx.Where("hash = ? AND expires_at > ?", tokenHash, now.UTC()).Take(&t).Error; err != nil {
			return err
		}
		res := tx.Delete(&LoginToken{}, t.ID)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return gorm.ErrRecordNotFound
		}
		sess.CreatedBy = t.CreatedBy
		return tx.Create(sess).Error
	})
	if err != nil {
		sess.ID = 0
		return fmt.Errorf("redeeming login token: %w", translate(err))
	}
	return nil
}

// SessionByHash returns one session.
func (s *sqlStore) SessionByHash(ctx context.Context, hash string) (*Session, error) {
	var out Session
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("hash = ?", hash).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting session: %w", translate(err))
	}
	out.CreatedAt, out.ExpiresAt = out.CreatedAt.UTC(), out.ExpiresAt.UTC()
	return &out, nil
}

// Sessions lists the live sessions.
func (s *sqlStore) Sessions(ctx context.Context, now time.Time) ([]*Session, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	var out []*Session
	if err := rd.Where("expires_at > ?", now.UTC()).Order("created_at, id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing sessions: %w", translate(err))
	}
	for _, x := range out {
		x.CreatedAt, x.ExpiresAt = x.CreatedAt.UTC(), x.ExpiresAt.UTC()
	}
	return out, nil
}

// DeleteSessions deletes sessions by hash prefix.
func (s *sqlStore) DeleteSessions(ctx context.Context, prefix string, exact bool) (int, error) {
	if len(prefix) < 8 || len(prefix) > hashLen {
		return 0, fmt.Errorf("deleting session %q: an id of 8 to 64 characters is required: %w", prefix, ErrInvalid)
	}
	for _, r := range prefix {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return 0, fmt.Errorf("deleting session %q: the id is lowercase hex: %w", prefix, ErrInvalid)
		}
	}
	var n int
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		q := tx.Where("hash = ?", prefix)
		if !exact {
			q = tx.Where("hash LIKE ?", prefix+"%")
		}
		res := q.Delete(&Session{})
		n = int(res.RowsAffected)
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("deleting session %q: %w", prefix, translate(err))
	}
	return n, nil
}

// PurgeAuth deletes expired login tokens and sessions.
func (s *sqlStore) PurgeAuth(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		n = 0
		for _, m := range []any{&LoginToken{}, &Session{}} {
			res := tx.Where("expires_at <= ?", now.UTC()).Delete(m)
			if res.Error != nil {
				return res.Error
			}
			n += int(res.RowsAffected)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purging expired logins and sessions: %w", translate(err))
	}
	return n, nil
}

// AddCertificate stores a trusted certificate.
func (s *sqlStore) AddCertificate(ctx context.Context, c *TrustedCertificate) error {
	if c == nil || len(c.Fingerprint) != hashLen || c.Certificate == "" {
		return fmt.Errorf("adding certificate: fingerprint and PEM are required: %w", ErrInvalid)
	}
	if err := checkColumns(column{"name", c.Name, 63}, column{"added by", c.AddedBy, 255}, column{"certificate", c.Certificate, 0}); err != nil {
		return fmt.Errorf("adding certificate %q: %w", c.Name, err)
	}
	c.AddedAt = c.AddedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		c.ID = 0
		return tx.Create(c).Error
	})
	if err != nil {
		c.ID = 0
		return fmt.Errorf("adding certificate %s: %w", c.Fingerprint, translate(err))
	}
	return nil
}

// Certificate returns one trusted certificate.
func (s *sqlStore) Certificate(ctx context.Context, fingerprint string) (*TrustedCertificate, error) {
	var out TrustedCertificate
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("fingerprint = ?", fingerprint).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting certificate %s: %w", fingerprint, translate(err))
	}
	out.AddedAt = out.AddedAt.UTC()
	return &out, nil
}

// Certificates lists the trusted certificates.
func (s *sqlStore) Certificates(ctx context.Context) ([]*TrustedCertificate, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing certificates: %w", err)
	}
	var out []*TrustedCertificate
	if err := rd.Order("name, fingerprint").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing certificates: %w", translate(err))
	}
	for _, c := range out {
		c.AddedAt = c.AddedAt.UTC()
	}
	return out, nil
}

// DeleteCertificate removes a trusted certificate.
func (s *sqlStore) DeleteCertificate(ctx context.Context, fingerprint string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("fingerprint = ?", fingerprint).Delete(&TrustedCertificate{}))
	})
	if err != nil {
		return fmt.Errorf("deleting certificate %s: %w", fingerprint, translate(err))
	}
	return nil
}

// bearerKind names the admin API's bearer identities in errors.
const bearerKind = "identity"

// CreateIdentity stores a bearer identity.
func (s *sqlStore) CreateIdentity(ctx context.Context, id *BearerIdentity) error {
	if id == nil {
		id = &BearerIdentity{} // refused below: no name
	}
	return createTokenIdentity(ctx, s, bearerKind, id, id.Name, id.CreatedBy, func() { id.ID = 0 })
}

// Identity returns one bearer identity.
func (s *sqlStore) Identity(ctx context.Context, name string) (*BearerIdentity, error) {
	out, err := tokenIdentityWhere[BearerIdentity](ctx, s, "name = ?", name)
	if err != nil {
		return nil, fmt.Errorf("getting identity %q: %w", name, err)
	}
	return out, nil
}

// IdentityByTokenHash returns the identity holding a token.
func (s *sqlStore) IdentityByTokenHash(ctx context.Context, hash string) (*BearerIdentity, error) {
	return tokenIdentityByHash[BearerIdentity](ctx, s, bearerKind, hash)
}

// Identities lists the bearer identities.
func (s *sqlStore) Identities(ctx context.Context) ([]*BearerIdentity, error) {
	return tokenIdentities[BearerIdentity](ctx, s, bearerKind)
}

// SetIdentityToken replaces or revokes an identity's token.
func (s *sqlStore) SetIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error {
	return setTokenIdentityToken[BearerIdentity](ctx, s, bearerKind, name, hash, issued, expires)
}

// DeleteIdentity removes a bearer identity and its token.
func (s *sqlStore) DeleteIdentity(ctx context.Context, name string) error {
	return deleteTokenIdentity[BearerIdentity](ctx, s, bearerKind, name)
}
