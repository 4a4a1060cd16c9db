package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/auth"
)

var _ auth.DevlxdStore = (*sqlStore)(nil)

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
func (s *sqlStore) CreateDevlxdIdentity(ctx context.Context, id *auth.DevlxdIdentity) error {
	if id == nil {
		id = &auth.DevlxdIdentity{} // refused below: no name
	}
	return createTokenIdentity(ctx, s, devlxdKind, devlxdIdentityRow(id), id.Name, id.CreatedBy)
}

// DevlxdIdentityByTokenHash returns the devlxd identity holding a token.
func (s *sqlStore) DevlxdIdentityByTokenHash(ctx context.Context, hash string) (*auth.DevlxdIdentity, error) {
	row, err := tokenIdentityByHash[devlxdIdentity](ctx, s, devlxdKind, hash)
	if err != nil {
		return nil, err
	}
	return row.identity(), nil
}

// DevlxdIdentities lists the devlxd identities.
func (s *sqlStore) DevlxdIdentities(ctx context.Context) ([]*auth.DevlxdIdentity, error) {
	rows, err := tokenIdentities[devlxdIdentity](ctx, s, devlxdKind)
	if err != nil {
		return nil, err
	}
	out := make([]*auth.DevlxdIdentity, len(rows))
	for i, r := range rows {
		out[i] = r.identity()
	}
	return out, nil
}

// SetDevlxdIdentityToken replaces or revokes a devlxd identity's token.
func (s *sqlStore) SetDevlxdIdentityToken(ctx context.Context, name, hash string, issued, expires *time.Time) error {
	return setTokenIdentityToken[devlxdIdentity](ctx, s, devlxdKind, name, hash, issued, expires)
}

// DeleteDevlxdIdentity removes a devlxd identity and its token.
func (s *sqlStore) DeleteDevlxdIdentity(ctx context.Context, name string) error {
	return deleteTokenIdentity[devlxdIdentity](ctx, s, devlxdKind, name)
}
