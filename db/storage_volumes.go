package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// StorageVolume is a custom volume of a storage pool, or a snapshot of one
// (Name "VOLUME/SNAPSHOT", as LXD names them).
type StorageVolume struct {
	ID          int64             `gorm:"primaryKey"`
	Pool        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:63;not null"`
	Name        string            `gorm:"uniqueIndex:idx_storage_volumes_pool_name;size:127;not null"`
	ContentType string            `gorm:"size:16;not null"` // "block"
	Description string            `gorm:"type:text;not null"`
	Config      map[string]string `gorm:"serializer:json;not null"`
	CreatedAt   time.Time         `gorm:"not null"`
}

// StorageStore keeps storage volumes. The Store returned by Open
// implements it; a nil return means the change is durable.
type StorageStore interface {
	// CreateStorageVolume stores v (sets v.ID); ErrAlreadyExists on a
	// duplicate pool and name.
	CreateStorageVolume(ctx context.Context, v *StorageVolume) error
	// StorageVolume returns one volume or snapshot.
	StorageVolume(ctx context.Context, pool, name string) (*StorageVolume, error)
	// StorageVolumes lists a pool's volumes and snapshots by name.
	StorageVolumes(ctx context.Context, pool string) ([]*StorageVolume, error)
	// UpdateStorageVolume saves v's description and config (matched by ID).
	UpdateStorageVolume(ctx context.Context, v *StorageVolume) error
	// DeleteStorageVolume removes one volume or snapshot.
	DeleteStorageVolume(ctx context.Context, pool, name string) error
}

var _ StorageStore = (*sqlStore)(nil)

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
func (s *sqlStore) CreateStorageVolume(ctx context.Context, v *StorageVolume) error {
	if v == nil || v.Pool == "" || v.Name == "" {
		return fmt.Errorf("creating storage volume: a pool and a name are required: %w", ErrInvalid)
	}
	if v.Config == nil {
		v.Config = map[string]string{}
	}
	v.CreatedAt = v.CreatedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		v.ID = 0
		return tx.Create(v).Error
	})
	if err != nil {
		v.ID = 0
		return fmt.Errorf("creating storage volume %s/%s: %w", v.Pool, v.Name, translate(err))
	}
	return nil
}

// StorageVolume returns one volume.
func (s *sqlStore) StorageVolume(ctx context.Context, pool, name string) (*StorageVolume, error) {
	var out StorageVolume
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("pool = ? AND name = ?", pool, name).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting storage volume %s/%s: %w", pool, name, translate(err))
	}
	out.CreatedAt = out.CreatedAt.UTC()
	return &out, nil
}

// StorageVolumes lists a pool's volumes.
func (s *sqlStore) StorageVolumes(ctx context.Context, pool string) ([]*StorageVolume, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing storage volumes: %w", err)
	}
	var out []*StorageVolume
	if err := rd.Where("pool = ?", pool).Order("name").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing storage volumes of %s: %w", pool, translate(err))
	}
	for _, v := range out {
		v.CreatedAt = v.CreatedAt.UTC()
	}
	return out, nil
}

// UpdateStorageVolume saves a volume's description and config.
func (s *sqlStore) UpdateStorageVolume(ctx context.Context, v *StorageVolume) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&StorageVolume{ID: v.ID}).Select("description", "config").Updates(&StorageVolume{Description: v.Description, Config: v.Config}))
	})
	if err != nil {
		return fmt.Errorf("updating storage volume %s/%s: %w", v.Pool, v.Name, translate(err))
	}
	return nil
}

// DeleteStorageVolume removes a volume.
func (s *sqlStore) DeleteStorageVolume(ctx context.Context, pool, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("pool = ? AND name = ?", pool, name).Delete(&StorageVolume{}))
	})
	if err != nil {
		return fmt.Errorf("deleting storage volume %s/%s: %w", pool, name, translate(err))
	}
	return nil
}
