package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/instance/record"
)

// snapshotRow is the gorm model of table snapshots (record.Snapshot as
// stored).
type snapshotRow struct {
	ID         int64                        `gorm:"primaryKey"`
	InstanceID int64                        `gorm:"uniqueIndex:idx_snapshots_instance_name,priority:1;not null"`
	Name       string                       `gorm:"uniqueIndex:idx_snapshots_instance_name,priority:2;size:63;not null"`
	CreatedAt  time.Time                    `gorm:"not null"`
	Stateful   bool                         `gorm:"not null;default:false"`
	Running    bool                         `gorm:"not null;default:false"`
	Ready      bool                         `gorm:"not null;default:false"`
	Backend    string                       `gorm:"size:64;not null"`
	Config     map[string]string            `gorm:"serializer:json;not null"`
	Devices    map[string]map[string]string `gorm:"serializer:json;not null"`
	DiskBytes  int64                        `gorm:"not null;default:0"`
	StateBytes int64                        `gorm:"not null;default:0"`
	Details    map[string]string            `gorm:"serializer:json;not null"` // backend facts: "layout", "ring_port"
	// Consistency is "filesystem", "crash" or "stopped" (core/instance);
	// snapshots stored before the column were never frozen: "crash".
	Consistency       string `gorm:"size:16;not null;default:'crash'"`
	ConsistencyDetail string `gorm:"type:text;not null;default:''"` // what was frozen, or why nothing was
}

// TableName is the model's table.
func (snapshotRow) TableName() string { return "snapshots" }

// snapshotRowOf is the row of sn; maps are shared, not copied.
func snapshotRowOf(sn *record.Snapshot) *snapshotRow {
	r := snapshotRow(*sn)
	return &r
}

// record is the row as the domain's snapshot; maps are shared.
func (r *snapshotRow) record() *record.Snapshot {
	sn := record.Snapshot(*r)
	return &sn
}

var _ record.SnapshotStore = (*sqlStore)(nil)

// migrationSnapshots creates the snapshots table (issue 16).
func migrationSnapshots() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611240501_snapshots",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the models as of this migration.
			type instance struct {
				ID int64 `gorm:"primaryKey"`
			}
			type snapshot struct {
				ID         int64     `gorm:"primaryKey"`
				InstanceID int64     `gorm:"uniqueIndex:idx_snapshots_instance_name,priority:1;not null"`
				Instance   *instance `gorm:"foreignKey:InstanceID;constraint:fk_snapshots_instance,OnDelete:CASCADE"`
				Name       string    `gorm:"uniqueIndex:idx_snapshots_instance_name,priority:2;size:63;not null"`
				CreatedAt  time.Time `gorm:"not null"`
				Stateful   bool      `gorm:"not null;default:false"`
				Running    bool      `gorm:"not null;default:false"`
				Ready      bool      `gorm:"not null;default:false"`
				Backend    string    `gorm:"size:64;not null"`
				Config     string    `gorm:"type:text;not null"`
				Devices    string    `gorm:"type:text;not null"`
				DiskBytes  int64     `gorm:"not null;default:0"`
				StateBytes int64     `gorm:"not null;default:0"`
				Details    string    `gorm:"type:text;not null"`
			}
			if err := tx.Migrator().CreateTable(&snapshot{}); err != nil {
				return fmt.Errorf("creating table snapshots: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("snapshots")
		},
	}
}

// CreateSnapshot stores s.
func (s *sqlStore) CreateSnapshot(ctx context.Context, sn *record.Snapshot) error {
	if sn == nil || sn.InstanceID == 0 || sn.Name == "" {
		return fmt.Errorf("creating snapshot: no instance or name: %w", ErrInvalid)
	}
	if sn.Config == nil {
		sn.Config = map[string]string{}
	}
	if sn.Devices == nil {
		sn.Devices = map[string]map[string]string{}
	}
	if sn.Details == nil {
		sn.Details = map[string]string{}
	}
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = now()
	}
	sn.CreatedAt = sn.CreatedAt.UTC()
	row := snapshotRowOf(sn)
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		row.ID = 0
		return tx.Create(row).Error
	})
	if err != nil {
		sn.ID = 0
		return fmt.Errorf("creating snapshot %q: %w", sn.Name, translate(err))
	}
	sn.ID = row.ID
	return nil
}

// Snapshots lists the instance's snapshots, oldest first.
func (s *sqlStore) Snapshots(ctx context.Context, instanceID int64) ([]*record.Snapshot, error) {
	var rows []*snapshotRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("instance_id = ?", instanceID).Order("created_at, id").Find(&rows).Error
	}
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", translate(err))
	}
	out := make([]*record.Snapshot, len(rows))
	for i, r := range rows {
		out[i] = r.record()
	}
	return out, nil
}

// Snapshot returns one snapshot.
func (s *sqlStore) Snapshot(ctx context.Context, instanceID int64, name string) (*record.Snapshot, error) {
	var sn snapshotRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("instance_id = ? AND name = ?", instanceID, name).Take(&sn).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting snapshot %q: %w", name, translate(err))
	}
	return sn.record(), nil
}

// RenameSnapshot renames a snapshot.
func (s *sqlStore) RenameSnapshot(ctx context.Context, instanceID int64, oldName, newName string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&snapshotRow{}).Where("instance_id = ? AND name = ?", instanceID, oldName).Update("name", newName))
	})
	if err != nil {
		return fmt.Errorf("renaming snapshot %q to %q: %w", oldName, newName, translate(err))
	}
	return nil
}

// DeleteSnapshot deletes a snapshot.
func (s *sqlStore) DeleteSnapshot(ctx context.Context, instanceID int64, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("instance_id = ? AND name = ?", instanceID, name).Delete(&snapshotRow{}))
	})
	if err != nil {
		return fmt.Errorf("deleting snapshot %q: %w", name, translate(err))
	}
	return nil
}

// migrationSnapshotConsistency adds snapshots.consistency and
// consistency_detail (issue 26): whether the guest's filesystems were frozen
// while the snapshot was taken. Existing snapshots were never frozen.
func migrationSnapshotConsistency() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611280101_snapshot_consistency",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copy of the columns as of this migration.
			type withConsistency struct {
				Consistency       string `gorm:"size:16;not null;default:'crash'"`
				ConsistencyDetail string `gorm:"type:text;not null;default:''"`
			}
			for _, f := range []string{"Consistency", "ConsistencyDetail"} {
				if err := tx.Table("snapshots").Migrator().AddColumn(&withConsistency{}, f); err != nil {
					return fmt.Errorf("adding snapshots.%s: %w", f, err)
				}
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			type withConsistency struct{ Consistency, ConsistencyDetail string }
			for _, f := range []string{"ConsistencyDetail", "Consistency"} {
				if err := tx.Table("snapshots").Migrator().DropColumn(&withConsistency{}, f); err != nil {
					return fmt.Errorf("dropping snapshots.%s: %w", f, err)
				}
			}
			return nil
		},
	}
}
