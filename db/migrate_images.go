package db

import (
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// imagesMigration creates the tables of the image store: images and their
// aliases (an alias goes with its image).
func imagesMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611240701_images",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the models as of this migration.
			type image struct {
				ID          int64     `gorm:"primaryKey"`
				Fingerprint string    `gorm:"uniqueIndex:idx_images_fingerprint;size:64;not null"`
				Filename    string    `gorm:"size:255;not null"`
				Size        int64     `gorm:"not null"`
				Format      string    `gorm:"size:16;not null"`
				Kernel      bool      `gorm:"not null;default:false"`
				Initrd      bool      `gorm:"not null;default:false"`
				Properties  string    `gorm:"type:text;not null"` // JSON object of strings
				CreatedAt   time.Time `gorm:"not null"`
			}
			type imageAlias struct {
				ID          int64  `gorm:"primaryKey"`
				Name        string `gorm:"uniqueIndex:idx_image_aliases_name;size:255;not null"`
				ImageID     int64  `gorm:"index:idx_image_aliases_image;not null"`
				Image       *image `gorm:"foreignKey:ImageID;constraint:fk_image_aliases_image,OnDelete:CASCADE"`
				Description string `gorm:"type:text"`
			}
			if err := tx.Migrator().CreateTable(&image{}); err != nil {
				return fmt.Errorf("creating table images: %w", err)
			}
			if err := tx.Migrator().CreateTable(&imageAlias{}); err != nil {
				return fmt.Errorf("creating table image_aliases: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("image_aliases", "images")
		},
	}
}

// imagesPublicMigration adds images.public: whether guests may download the
// image through devlxd (LXD's public flag). Existing images stay private.
func imagesPublicMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611270102_images_public",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copy of the column as of this migration.
			type withPublic struct {
				Public bool `gorm:"not null;default:false"`
			}
			if err := tx.Table("images").Migrator().AddColumn(&withPublic{}, "Public"); err != nil {
				return fmt.Errorf("adding images.public: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Table("images").Migrator().DropColumn(&struct{ Public bool }{}, "Public")
		},
	}
}
