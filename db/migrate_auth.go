package db

import (
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// authMigration creates the tables of the admin API's authentication: the
// trust store of client certificates, bearer identities, dashboard login
// tokens and sessions.
func authMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611230002_auth",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the models as of this migration.
			type trustedCertificate struct {
				ID          int64     `gorm:"primaryKey"`
				Name        string    `gorm:"size:63;not null"`
				Fingerprint string    `gorm:"uniqueIndex:idx_trusted_certificates_fingerprint;size:64;not null"`
				Certificate string    `gorm:"type:text;not null"`
				AddedAt     time.Time `gorm:"not null"`
				AddedBy     string    `gorm:"size:255"`
			}
			type bearerIdentity struct {
				ID             int64  `gorm:"primaryKey"`
				Name           string `gorm:"uniqueIndex:idx_bearer_identities_name;size:63;not null"`
				TokenHash      string `gorm:"index:idx_bearer_identities_token_hash;size:64"`
				TokenIssuedAt  *time.Time
				TokenExpiresAt *time.Time
				CreatedAt      time.Time `gorm:"not null"`
				CreatedBy      string    `gorm:"size:255"`
			}
			type loginToken struct {
				ID        int64     `gorm:"primaryKey"`
				Hash      string    `gorm:"uniqueIndex:idx_login_tokens_hash;size:64;not null"`
				CreatedAt time.Time `gorm:"not null"`
				ExpiresAt time.Time `gorm:"index:idx_login_tokens_expires_at;not null"`
				CreatedBy string    `gorm:"size:255"`
			}
			type session struct {
				ID        int64     `gorm:"primaryKey"`
				Hash      string    `gorm:"uniqueIndex:idx_sessions_hash;size:64;not null"`
				CreatedAt time.Time `gorm:"not null"`
				ExpiresAt time.Time `gorm:"index:idx_sessions_expires_at;not null"`
				CreatedBy string    `gorm:"size:255"`
			}
			for _, m := range []any{&trustedCertificate{}, &bearerIdentity{}, &loginToken{}, &session{}} {
				if err := tx.Migrator().CreateTable(m); err != nil {
					return fmt.Errorf("creating table for %T: %w", m, err)
				}
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("sessions", "login_tokens", "bearer_identities", "trusted_certificates")
		},
	}
}

// Roles of the admin API's identities (trusted certificates and bearer
// identities).
const (
	// RoleAdmin may do everything the admin API offers.
	RoleAdmin = "admin"
	// RoleViewer may read instances, images, storage, backends, cluster
	// members and events, and change nothing.
	RoleViewer = "viewer"
)

// rolesMigration gives trusted certificates and bearer identities a role;
// those that exist stay admins.
func rolesMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611260101_identity_roles",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copy of the column as of this migration.
			type withRole struct {
				Role string `gorm:"size:16;not null;default:admin"`
			}
			for _, table := range []string{"trusted_certificates", "bearer_identities"} {
				if err := tx.Table(table).Migrator().AddColumn(&withRole{}, "Role"); err != nil {
					return fmt.Errorf("adding %s.role: %w", table, err)
				}
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			for _, table := range []string{"trusted_certificates", "bearer_identities"} {
				if err := tx.Table(table).Migrator().DropColumn(&struct{ Role string }{}, "Role"); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
