package db

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/errdefs"
)

var _ auth.Store = (*sqlStore)(nil)

// hashLen is the length of a hex SHA-256.
const hashLen = 64

// CreateLoginToken stores t unless maxLive live tokens exist.
func (s *sqlStore) CreateLoginToken(ctx context.Context, t *auth.LoginToken, now time.Time, maxLive int) error {
	if t == nil || len(t.Hash) != hashLen {
		return fmt.Errorf("creating login token: a SHA-256 hash is required: %w", ErrInvalid)
	}
	t.CreatedAt, t.ExpiresAt = t.CreatedAt.UTC(), t.ExpiresAt.UTC()
	if err := checkColumns(column{"created by", t.CreatedBy, 255}); err != nil {
		return fmt.Errorf("creating login token: %w", err)
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&loginToken{}).Where("expires_at > ?", now.UTC()).Count(&n).Error; err != nil {
			return err
		}
		if maxLive > 0 && n >= int64(maxLive) {
			return fmt.Errorf("%d login tokens are live, the most allowed: %w", n, errdefs.ErrConflict)
		}
		return tx.Create(&loginToken{Hash: t.Hash, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, CreatedBy: t.CreatedBy}).Error
	})
	if err != nil {
		return fmt.Errorf("creating login token: %w", translate(err))
	}
	return nil
}

// RedeemLoginToken swaps a login token for a session in one transaction.
func (s *sqlStore) RedeemLoginToken(ctx context.Context, tokenHash string, now time.Time, sess *auth.SessionRecord) error {
	if sess == nil || len(sess.Hash) != hashLen {
		return fmt.Errorf("redeeming login token: a session hash is required: %w", ErrInvalid)
	}
	sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var t loginToken
		if err := tx.Where("hash = ? AND expires_at > ?", tokenHash, now.UTC()).Take(&t).Error; err != nil {
			return err
		}
		res := tx.Delete(&loginToken{}, t.ID)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return gorm.ErrRecordNotFound
		}
		sess.CreatedBy = t.CreatedBy
		return tx.Create(&session{Hash: sess.Hash, CreatedAt: sess.CreatedAt, ExpiresAt: sess.ExpiresAt, CreatedBy: sess.CreatedBy}).Error
	})
	if err != nil {
		return fmt.Errorf("redeeming login token: %w", translate(err))
	}
	return nil
}

// SessionByHash returns one session.
func (s *sqlStore) SessionByHash(ctx context.Context, hash string) (*auth.SessionRecord, error) {
	var out session
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("hash = ?", hash).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting session: %w", translate(err))
	}
	return out.record(), nil
}

// Sessions lists the live sessions.
func (s *sqlStore) Sessions(ctx context.Context, now time.Time) ([]*auth.SessionRecord, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	var rows []*session
	if err := rd.Where("expires_at > ?", now.UTC()).Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing sessions: %w", translate(err))
	}
	out := make([]*auth.SessionRecord, len(rows))
	for i, x := range rows {
		out[i] = x.record()
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
		res := q.Delete(&session{})
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
		for _, m := range []any{&loginToken{}, &session{}} {
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
func (s *sqlStore) AddCertificate(ctx context.Context, c *auth.Certificate) error {
	if c == nil || len(c.Fingerprint) != hashLen || c.Certificate == "" {
		return fmt.Errorf("adding certificate: fingerprint and PEM are required: %w", ErrInvalid)
	}
	if err := checkColumns(column{"name", c.Name, 63}, column{"added by", c.AddedBy, 255}, column{"certificate", c.Certificate, 0}); err != nil {
		return fmt.Errorf("adding certificate %q: %w", c.Name, err)
	}
	c.AddedAt = c.AddedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return tx.Create(trustedCertificateRow(c)).Error
	})
	if err != nil {
		return fmt.Errorf("adding certificate %s: %w", c.Fingerprint, translate(err))
	}
	return nil
}

// Certificate returns one trusted certificate.
func (s *sqlStore) Certificate(ctx context.Context, fingerprint string) (*auth.Certificate, error) {
	var out trustedCertificate
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("fingerprint = ?", fingerprint).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting certificate %s: %w", fingerprint, translate(err))
	}
	return out.certificate(), nil
}

// Certificates lists the trusted certificates.
func (s *sqlStore) Certificates(ctx context.Context) ([]*auth.Certificate, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing certificates: %w", err)
	}
	var rows []*trustedCertificate
	if err := rd.Order("name, fingerprint").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing certificates: %w", translate(err))
	}
	out := make([]*auth.Certificate, len(rows))
	for i, c := range rows {
		out[i] = c.certificate()
	}
	return out, nil
}

// DeleteCertificate removes a trusted certificate.
func (s *sqlStore) DeleteCertificate(ctx context.Context, fingerprint string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("fingerprint = ?", fingerprint).Delete(&trustedCertificate{}))
	})
	if err != nil {
		return fmt.Errorf("deleting certificate %s: %w", fingerprint, translate(err))
	}
	return nil
}

// bearerKind names the admin API's bearer identities in errors.
const bearerKind = "identity"

// CreateIdentity stores a bearer identity.
func (s *sqlStore) CreateIdentity(ctx context.Context, id *auth.BearerIdentity) error {
	if id == nil {
		id = &auth.BearerIdentity{} // refused below: no name
	}
	return createTokenIdentity(ctx, s, bearerKind, bearerIdentityRow(id), id.Name, id.CreatedBy)
}

// Identity returns one bearer identity.
func (s *sqlStore) Identity(ctx context.Context, name string) (*auth.BearerIdentity, error) {
	out, err := tokenIdentityWhere[bearerIdentity](ctx, s, "name = ?", name)
	if err != nil {
		return nil, fmt.Errorf("getting identity %q: %w", name, err)
	}
	return out.identity(), nil
}

// IdentityByTokenHash returns the identity holding a token.
func (s *sqlStore) IdentityByTokenHash(ctx context.Context, hash string) (*auth.BearerIdentity, error) {
	out, err := tokenIdentityByHash[bearerIdentity](ctx, s, bearerKind, hash)
	if err != nil {
		return nil, err
	}
	return out.identity(), nil
}

// Identities lists the bearer identities.
func (s *sqlStore) Identities(ctx context.Context) ([]*auth.BearerIdentity, error) {
	rows, err := tokenIdentities[bearerIdentity](ctx, s, bearerKind)
	if err != nil {
		return nil, err
	}
	out := make([]*auth.BearerIdentity, len(rows))
	for i, r := range rows {
		out[i] = r.identity()
	}
	return out, nil
}

// SetIdentityToken replaces or revokes an identity's token.
func (s *sqlStore) SetIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error {
	return setTokenIdentityToken[bearerIdentity](ctx, s, bearerKind, name, hash, issued, expires)
}

// DeleteIdentity removes a bearer identity and its token.
func (s *sqlStore) DeleteIdentity(ctx context.Context, name string) error {
	return deleteTokenIdentity[bearerIdentity](ctx, s, bearerKind, name)
}
