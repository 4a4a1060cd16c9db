package db

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// The admin API's bearer identities (bearerIdentity) and devlxd's
// (devlxdIdentity) are two tables of one shape: a unique name, the SHA-256
// of at most one live token, its issue and expiry times, who created it and
// when. The functions below are their store operations, once; each kind's
// exported methods name their kind in errors ("identity", "devlxd
// identity").

// tokenIdentity is a row of either identity table.
type tokenIdentity interface {
	bearerIdentity | devlxdIdentity
}

// tokenIdentityPtr is a pointer to a tokenIdentity that can put its times
// in UTC and zero its ID.
type tokenIdentityPtr[T tokenIdentity] interface {
	*T
	normalize()
	resetID()
}

// resetID zeroes the row's ID.
func (id *bearerIdentity) resetID() { id.ID = 0 }

// resetID zeroes the row's ID.
func (id *devlxdIdentity) resetID() { id.ID = 0 }

// normalize puts the identity's times in UTC.
func (id *bearerIdentity) normalize() {
	utcTimes(&id.CreatedAt, &id.TokenIssuedAt, &id.TokenExpiresAt)
}

// normalize puts the identity's times in UTC.
func (id *devlxdIdentity) normalize() {
	utcTimes(&id.CreatedAt, &id.TokenIssuedAt, &id.TokenExpiresAt)
}

// utcTimes puts created and the optional times in UTC.
func utcTimes(created *time.Time, opt ...**time.Time) {
	*created = created.UTC()
	for _, t := range opt {
		*t = utcPtr(*t)
	}
}

// utcPtr returns t in UTC, nil for nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// createTokenIdentity stores rec, whose name and creator are given for the
// checks.
func createTokenIdentity[T tokenIdentity, P tokenIdentityPtr[T]](ctx context.Context, s *sqlStore, kind string, rec P, name, createdBy string) error {
	if name == "" {
		return fmt.Errorf("creating %s: a name is required: %w", kind, ErrInvalid)
	}
	if err := checkColumns(column{"name", name, 63}, column{"created by", createdBy, 255}); err != nil {
		return fmt.Errorf("creating %s %q: %w", kind, name, err)
	}
	rec.normalize()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		rec.resetID() // a retried transaction inserts afresh
		return tx.Create(rec).Error
	})
	if err != nil {
		return fmt.Errorf("creating %s %q: %w", kind, name, translate(err))
	}
	return nil
}

// tokenIdentityWhere returns the one identity matching the condition.
func tokenIdentityWhere[T tokenIdentity, P tokenIdentityPtr[T]](ctx context.Context, s *sqlStore, cond string, arg any) (*T, error) {
	var out T
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where(cond, arg).Take(&out).Error
	}
	if err != nil {
		return nil, translate(err)
	}
	P(&out).normalize()
	return &out, nil
}

// tokenIdentityByHash returns the identity whose live token hashes to hash.
func tokenIdentityByHash[T tokenIdentity, P tokenIdentityPtr[T]](ctx context.Context, s *sqlStore, kind, hash string) (*T, error) {
	if len(hash) != hashLen {
		return nil, fmt.Errorf("getting %s by token: %w", kind, ErrNotFound)
	}
	out, err := tokenIdentityWhere[T, P](ctx, s, "token_hash = ?", hash)
	if err != nil {
		return nil, fmt.Errorf("getting %s by token: %w", kind, err)
	}
	return out, nil
}

// tokenIdentities lists the identities of one kind by name.
func tokenIdentities[T tokenIdentity, P tokenIdentityPtr[T]](ctx context.Context, s *sqlStore, kind string) ([]*T, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing %ss: %w", kind, err)
	}
	var out []*T
	if err := rd.Order("name").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing %ss: %w", kind, translate(err))
	}
	for _, id := range out {
		P(id).normalize()
	}
	return out, nil
}

// setTokenIdentityToken replaces (hash != "") or revokes the identity's token.
func setTokenIdentityToken[T tokenIdentity](ctx context.Context, s *sqlStore, kind, name, hash string, issued, expires *time.Time) error {
	if hash != "" && len(hash) != hashLen {
		return fmt.Errorf("setting token of %s %q: a SHA-256 hash is required: %w", kind, name, ErrInvalid)
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(new(T)).Where("name = ?", name).Updates(map[string]any{
			"token_hash": hash, "token_issued_at": utcPtr(issued), "token_expires_at": utcPtr(expires),
		}))
	})
	if err != nil {
		return fmt.Errorf("setting token of %s %q: %w", kind, name, translate(err))
	}
	return nil
}

// deleteTokenIdentity removes the identity called name and its token.
func deleteTokenIdentity[T tokenIdentity](ctx context.Context, s *sqlStore, kind, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("name = ?", name).Delete(new(T)))
	})
	if err != nil {
		return fmt.Errorf("deleting %s %q: %w", kind, name, translate(err))
	}
	return nil
}
