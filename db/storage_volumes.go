package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/storage"
)

// storageVolume is the row of a custom volume of a storage pool, or of a
// snapshot of one (Name "VOLUME/SNAPSHOT", as LXD names them): the store's
// form of core/storage's Volume.
type storageVolume struct {
	ID          int64             `gorm:"primaryKey"`
	Pool        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:63;not null"`
	Name        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:127;not null"`
	ContentType string            `gorm:"size:16;not null"` // "block"
	Description string            `gorm:"type:text;not null"`
	Config      map[string]string `gorm:"serializer:json;not null"`
	CreatedAt   time.Time         `gorm:"not null"`
}

// TableName is the table of storage volumes.
func (storageVolume) TableName() string { return "storage_volumes" }

// storageVolumeRow is v's row.
func storageVolumeRow(v *storage.Volume) *storageVolume {
	return &storageVolume{Pool: v.Pool, Name: v.Name, ContentType: v.ContentType, Description: v.Description, Config: v.Config, CreatedAt: v.CreatedAt}
}

// volume is the row's core/storage Volume (its type and location are the
// service's).
func (r *storageVolume) volume() *storage.Volume {
	return &storage.Volume{Pool: r.Pool, Name: r.Name, ContentType: r.ContentType, Description: r.Description, Config: r.Config, CreatedAt: r.CreatedAt.UTC()}
}

var _ storage.Store = (*sqlStore)(nil)

// storageVolumesMigration creates the storage_volumes table.
func storageVolumesMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611240402_storage_volumes",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copy of the model as of this migration.
			type storageVolume struct {
				ID          int64             `gorm:"primaryKey"`
				Pool        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:63;not null"`
				Name        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:127;not null"`
				ContentType string            `gorm:"size:16;not null"`
				Description string            `gorm:"type:text;not null"`
				Config      map[string]string `gorm:"serializer:json;not null"`
				CreatedAt   time.Time         `gorm:"not null"`
			}
			if err := tx.Migrator().CreateTable(&storageVolume{}); err != nil {
				return fmt.Errorf("creating table storage_volumes: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("storage_volumes")
		},
	}
}

// CreateStorageVolume stores a volume.
func (s *sqlStore) CreateStorageVolume(ctx context.Context, v *storage.Volume) error {
	if v == nil || v.Pool == "" || v.Name == "" {
		return fmt.Errorf("creating storage volume: a pool and a name are required: %w", ErrInvalid)
	}
	if v.Config == nil {
		v.Config = map[string]string{}
	}
	v.CreatedAt = v.CreatedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return tx.Create(storageVolumeRow(v)).Error
	})
	if err != nil {
		return fmt.Errorf("creating storage volume %s/%s: %w", v.Pool, v.Name, translate(err))
	}
	return nil
}

// StorageVolume returns one volume.
func (s *sqlStore) StorageVolume(ctx context.Context, pool, name string) (*storage.Volume, error) {
	var out storageVolume
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("pool = ? AND name = ?", pool, name).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting storage volume %s/%s: %w", pool, name, translate(err))
	}
	return out.volume(), nil
}

// StorageVolumes lists a pool's volumes.
func (s *sqlStore) StorageVolumes(ctx context.Context, pool string) ([]*storage.Volume, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing storage volumes: %w", err)
	}
	var rows []*storageVolume
	if err := rd.Where("pool = ?", pool).Order("name").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing storage volumes of %s: %w", pool, translate(err))
	}
	out := make([]*storage.Volume, len(rows))
	for i, r := range rows {
		out[i] = r.volume()
	}
	return out, nil
}

// UpdateStorageVolume saves a volume's description and config.
func (s *sqlStore) UpdateStorageVolume(ctx context.Context, v *storage.Volume) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&storageVolume{}).Where("pool = ? AND name = ?", v.Pool, v.Name).
			Select("description", "config").Updates(&storageVolume{Description: v.Description, Config: v.Config}))
	})
	if err != nil {
		return fmt.Errorf("updating storage volume %s/%s: %w", v.Pool, v.Name, translate(err))
	}
	return nil
}

// DeleteStorageVolume removes a volume.
func (s *sqlStore) DeleteStorageVolume(ctx context.Context, pool, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("pool = ? AND name = ?", pool, name).Delete(&storageVolume{}))
	})
	if err != nil {
		return fmt.Errorf("deleting storage volume %s/%s: %w", pool, name, translate(err))
	}
	return nil
}
