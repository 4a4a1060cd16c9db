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

// devlxdKind names devlxd identities in errors.
const devlxdKind = "devlxd identity"

// CreateDevlxdIdentity stores a devlxd identity.
func (s *sqlStore) CreateDevlxdIdentity(ctx context.Context, id *DevlxdIdentity) error {
	if id == nil {
		id = &DevlxdIdentity{} // refused below: no name
	}
	return createTokenIdentity(ctx, s, devlxdKind, id, id.Name, id.CreatedBy, func() { id.ID = 0 })
}

// DevlxdIdentityByTokenHash returns the devlxd identity holding a token.
func (s *sqlStore) DevlxdIdentityByTokenHash(ctx context.Context, hash string) (*DevlxdIdentity, error) {
	return tokenIdentityByHash[DevlxdIdentity](ctx, s, devlxdKind, hash)
}

// DevlxdIdentities lists the devlxd identities.
func (s *sqlStore) DevlxdIdentities(ctx context.Context) ([]*DevlxdIdentity, error) {
	return tokenIdentities[DevlxdIdentity](ctx, s, devlxdKind)
}

// SetDevlxdIdentityToken replaces or revokes a devlxd identity's token.
func (s *sqlStore) SetDevlxdIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error {
	return setTokenIdentityToken[DevlxdIdentity](ctx, s, devlxdKind, name, hash, issued, expires)
}

// DeleteDevlxdIdentity removes a devlxd identity and its token.
func (s *sqlStore) DeleteDevlxdIdentity(ctx context.Context, name string) error {
	return deleteTokenIdentity[DevlxdIdentity](ctx, s, devlxdKind, name)
}
