package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// Advisory lock keys (PostgreSQL). Both are arbitrary constants private to
// guestlink: "gl-migr" and "gl-evnt" in ASCII.
const (
	migrateLockKey int64 = 0x676c2d6d696772
	eventLockKey   int64 = 0x676c2d65766e74
)

// ErrSchemaTooNew is returned (wrapped) by Open when the database holds
// migrations this binary does not know: it was written by a newer guestlink.
var ErrSchemaTooNew = errors.New("database schema is newer than this program")

// migrations is the ordered schema history. Never edit a released
// migration: add a new one. Each migration declares its own frozen copies
// of the structs it creates, so later changes to the live models in
// models.go cannot change what an old migration does.
func migrations() []*gormigrate.Migration {
	return []*gormigrate.Migration{
		{
			ID: "202611220001_initial",
			Migrate: func(tx *gorm.DB) error {
				// Frozen copies of the models as of this migration. Their
				// names give the table names under gorm's default naming:
				// instances, timeline_entries, events.
				type instance struct {
					ID         int64  `gorm:"primaryKey"`
					Name       string `gorm:"uniqueIndex:idx_instances_name;size:63;not null"`
					UUID       string `gorm:"uniqueIndex:idx_instances_uuid;size:36;not null"`
					Backend    string `gorm:"index:idx_instances_backend;size:64;not null"`
					Config     string `gorm:"type:text;not null"` // JSON object of strings
					Devices    string `gorm:"type:text;not null"` // JSON object of objects
					Handle     []byte
					PowerState string `gorm:"index:idx_instances_power_state;size:16;not null"`
					Boot       int64  `gorm:"not null;default:0"`
					CreatedAt  time.Time
					StartedAt  *time.Time
					UpdatedAt  time.Time
				}
				type timelineEntry struct {
					ID         int64     `gorm:"primaryKey"`
					InstanceID int64     `gorm:"index:idx_timeline_instance,priority:1;not null"`
					Instance   *instance `gorm:"foreignKey:InstanceID;constraint:fk_timeline_instance,OnDelete:CASCADE"`
					Time       time.Time `gorm:"index:idx_timeline_instance,priority:2;not null"`
					Boot       int64     `gorm:"not null"`
					Kind       string    `gorm:"size:16;not null"`
					From       string    `gorm:"size:32"`
					To         string    `gorm:"size:32;not null"`
					Cause      string    `gorm:"size:64"`
					Detail     string    `gorm:"type:text"`
				}
				type event struct {
					ID       int64     `gorm:"primaryKey;autoIncrement"`
					Time     time.Time `gorm:"index:idx_events_time;not null"`
					Type     string    `gorm:"size:32;not null"`
					Instance string    `gorm:"index:idx_events_instance;size:63"`
					Body     []byte    `gorm:"not null"`
				}
				if err := tx.Migrator().CreateTable(&instance{}); err != nil {
					return fmt.Errorf("creating table instances: %w", err)
				}
				if err := tx.Migrator().CreateTable(&timelineEntry{}); err != nil {
					return fmt.Errorf("creating table timeline_entries: %w", err)
				}
				if err := tx.Migrator().CreateTable(&event{}); err != nil {
					return fmt.Errorf("creating table events: %w", err)
				}
				return nil
			},
			Rollback: func(tx *gorm.DB) error {
				return tx.Migrator().DropTable("events", "timeline_entries", "instances")
			},
		},
		migrationEventsByInstance(),
		authMigration(),
		migrationSnapshots(),
		devlxdIdentitiesMigration(),
		storageVolumesMigration(),
		imagesMigration(),
		clusterMigration(),
		rolesMigration(),
		leaseMigration(),
		imagesPublicMigration(),
		profilesMigration(),
		migrationSnapshotConsistency(),
	}
}

// migrate brings the schema up to date in one transaction. On PostgreSQL a
// transaction-scoped advisory lock serialises daemons migrating at once; on
// SQLite the transaction's immediate write lock does the same.
func migrate(ctx context.Context, gdb *gorm.DB, engine string) error {
	return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if engine == EnginePostgres {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrateLockKey).Error; err != nil {
				return fmt.Errorf("taking migration lock: %w", err)
			}
		}
		m := gormigrate.New(tx, &gormigrate.Options{
			TableName:                 "migrations",
			IDColumnName:              "id",
			IDColumnSize:              255,
			ValidateUnknownMigrations: true,
		}, migrations())
		if err := m.Migrate(); err != nil {
			if errors.Is(err, gormigrate.ErrUnknownPastMigration) {
				return fmt.Errorf("migrating schema: %w: %w", ErrSchemaTooNew, err)
			}
			return fmt.Errorf("migrating schema: %w", err)
		}
		return nil
	})
}
