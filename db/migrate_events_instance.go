package db

import (
	"fmt"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// migrationEventsByInstance replaces the index of events on instance with
// one on (instance, id), which the per-instance event retention (prune in
// retention.go) walks: the newest ids of one instance and the range below
// them, on SQLite and PostgreSQL alike. Its prefix serves what the old
// index served.
func migrationEventsByInstance() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611230001_events_instance_id",
		Migrate: func(tx *gorm.DB) error {
			if err := tx.Exec(`CREATE INDEX IF NOT EXISTS "idx_events_instance_id" ON "events" ("instance", "id")`).Error; err != nil {
				return fmt.Errorf("creating index idx_events_instance_id: %w", err)
			}
			if err := tx.Exec(`DROP INDEX IF EXISTS "idx_events_instance"`).Error; err != nil {
				return fmt.Errorf("dropping index idx_events_instance: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			if err := tx.Exec(`CREATE INDEX IF NOT EXISTS "idx_events_instance" ON "events" ("instance")`).Error; err != nil {
				return fmt.Errorf("creating index idx_events_instance: %w", err)
			}
			return tx.Exec(`DROP INDEX IF EXISTS "idx_events_instance_id"`).Error
		},
	}
}
