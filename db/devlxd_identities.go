package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// DevlxdIdentity is a devlxd identity: a named bearer identity that a guest
// presents on /dev/lxd/sock (Authorization: Bearer) to use the trusted
// devlxd management API, scoped to the instances it may act for. It is a
// separate kind from BearerIdentity (the admin API's): neither token works
// on the other's API. Only the SHA-256 of its one live token is stored.
type DevlxdIdentity struct {
	ID             int64  `gorm:"primaryKey"`
	Name           string `gorm:"uniqueIndex:idx_devlxd_identities_name;size:63;not null"`
	Instances      string `gorm:"type:text;not null"` // comma-separated instance names (DNS labels)
	TokenHash      string `gorm:"index:idx_devlxd_identities_token_hash;size:64"`
	TokenIssuedAt  *time.Time
	TokenExpiresAt *time.Time // nil: the token does not expire
	CreatedAt      time.Time  `gorm:"not null"`
	CreatedBy      string     `gorm:"size:255"`
}

// DevlxdIdentityStore keeps the devlxd identities. The Store returned by
// Open implements it; a nil return means the change is durable.
type DevlxdIdentityStore interface {
	// CreateDevlxdIdentity stores id (sets id.ID); ErrAlreadyExists on a
	// duplicate name.
	CreateDevlxdIdentity(ctx context.Context, id *DevlxdIdentity) error
	// DevlxdIdentityByTokenHash returns the identity whose live token
	// hashes to hash.
	DevlxdIdentityByTokenHash(ctx context.Context, hash string) (*DevlxdIdentity, error)
	// DevlxdIdentities lists the devlxd identities by name.
	DevlxdIdentities(ctx context.Context) ([]*DevlxdIdentity, error)
	// SetDevlxdIdentityToken replaces the identity's token: hash "" revokes
	// it.
	SetDevlxdIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error
	// DeleteDevlxdIdentity removes the devlxd identity called name.
	DeleteDevlxdIdentity(ctx context.Context, name string) error
}

var _ DevlxdIdentityStore = (*sqlStore)(nil)

// devlxdIdentitiesMigration creates the devlxd_identities table.
func devlxdIdentitiesMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611240401_devlxd_identities",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copy of the model as of this migration.
			type devlxdIdentity struct {
				ID             int64  `gorm:"primaryKey"`
				Name           string `gorm:"uniqueIndex:idx_devlxd_identities_name;size:63;not null"`
				Instances      string `gorm:"type:text;not null"`
				TokenHash      string `gorm:"index:idx_devlxd_identities_token_hash;size:64"`
				TokenIssuedAt  *time.Time
				TokenExpiresAt *time.Time
				CreatedAt      time.Time `gorm:"not null"`
				CreatedBy      string    `gorm:"size:255"`
			}
			if err := tx.Migrator().CreateTable(&devlxdIdentity{}); err != nil {
				return fmt.Errorf("creating table devlxd_identities: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("devlxd_identities")
		},
	}
}

func normalizeDevlxdIdentity(id *DevlxdIdentity) {
	id.CreatedAt = id.CreatedAt.UTC()
	for _, t := range []**time.Time{&id.TokenIssuedAt, &id.TokenExpiresAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
}

// CreateDevlxdIdentity stores a devlxd identity.
func (s *sqlStore) CreateDevlxdIdentity(ctx context.Context, id *DevlxdIdentity) error {
	if id == nil || id.Name == "" {
		return fmt.Errorf("creating devlxd identity: a name is required: %w", ErrInvalid)
	}
	if err := checkColumns(column{"name", id.Name, 63}, column{"created by", id.CreatedBy, 255}); err != nil {
		return fmt.Errorf("creating devlxd identity %q: %w", id.Name, err)
	}
	id.CreatedAt = id.CreatedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		id.ID = 0
		return tx.Create(id).Error
	})
	if err != nil {
		id.ID = 0
		return fmt.Errorf("creating devlxd identity %q: %w", id.Name, translate(err))
	}
	return nil
}

// DevlxdIdentityByTokenHash returns the devlxd identity holding a token.
func (s *sqlStore) DevlxdIdentityByTokenHash(ctx context.Context, hash string) (*DevlxdIdentity, error) {
	if len(hash) != hashLen {
		return nil, fmt.Errorf("getting devlxd identity by token: %w", ErrNotFound)
	}
	var out DevlxdIdentity
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("token_hash = ?", hash).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting devlxd identity by token: %w", translate(err))
	}
	normalizeDevlxdIdentity(&out)
	return &out, nil
}

// DevlxdIdentities lists the devlxd identities.
func (s *sqlStore) DevlxdIdentities(ctx context.Context) ([]*DevlxdIdentity, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing devlxd identities: %w", err)
	}
	var out []*DevlxdIdentity
	if err := rd.Order("name").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing devlxd identities: %w", translate(err))
	}
	for _, id := range out {
		normalizeDevlxdIdentity(id)
	}
	return out, nil
}

// SetDevlxdIdentityToken replaces or revokes a devlxd identity's token.
func (s *sqlStore) SetDevlxdIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error {
	if hash != "" && len(hash) != hashLen {
		return fmt.Errorf("setting token of devlxd identity %q: a SHA-256 hash is required: %w", name, ErrInvalid)
	}
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		res := tx.Model(&DevlxdIdentity{}).Where("name = ?", name).Updates(map[string]any{
			"token_hash": hash, "token_issued_at": utc(issued), "token_expires_at": utc(expires),
		})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return gorm.ErrRecordNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("setting token of devlxd identity %q: %w", name, translate(err))
	}
	return nil
}

// DeleteDevlxdIdentity removes a devlxd identity and its token.
func (s *sqlStore) DeleteDevlxdIdentity(ctx context.Context, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		res := tx.Where("name = ?", name).Delete(&DevlxdIdentity{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return gorm.ErrRecordNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting devlxd identity %q: %w", name, translate(err))
	}
	return nil
}
