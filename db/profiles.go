package db

import (
	"context"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/instance/record"
)

// profileRow is the gorm model of table profiles (record.Profile as
// stored).
type profileRow struct {
	ID          int64                        `gorm:"primaryKey"`
	Name        string                       `gorm:"uniqueIndex;size:63;not null"`
	Description string                       `gorm:"type:text;not null"`
	Config      map[string]string            `gorm:"serializer:json;not null"`
	Devices     map[string]map[string]string `gorm:"serializer:json;not null"`
	CreatedAt   time.Time                    `gorm:"not null"`
	UpdatedAt   time.Time
}

// TableName is the model's table.
func (profileRow) TableName() string { return "profiles" }

// record is the row as the domain's profile; maps are shared.
func (r *profileRow) record() *record.Profile {
	p := record.Profile(*r)
	return &p
}

var _ record.ProfileStore = (*sqlStore)(nil)

// profilesMigration creates the profiles table and adds instances.profiles.
// Instances that exist before it keep no profile: they were made without
// one, and giving them the default profile's devices at their next start
// would change them behind their owner's back.
func profilesMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611272101_profiles",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the models as of this migration.
			type profile struct {
				ID          int64                        `gorm:"primaryKey"`
				Name        string                       `gorm:"uniqueIndex:idx_profiles_name;size:63;not null"`
				Description string                       `gorm:"type:text;not null"`
				Config      map[string]string            `gorm:"serializer:json;not null"`
				Devices     map[string]map[string]string `gorm:"serializer:json;not null"`
				CreatedAt   time.Time                    `gorm:"not null"`
				UpdatedAt   time.Time
			}
			type instance struct {
				Profiles []string `gorm:"serializer:json"`
			}
			if err := tx.Migrator().CreateTable(&profile{}); err != nil {
				return fmt.Errorf("creating table profiles: %w", err)
			}
			if err := tx.Migrator().AddColumn(&instance{}, "Profiles"); err != nil {
				return fmt.Errorf("adding column instances.profiles: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			type instance struct {
				Profiles []string `gorm:"serializer:json"`
			}
			if err := tx.Migrator().DropColumn(&instance{}, "Profiles"); err != nil {
				return err
			}
			return tx.Migrator().DropTable("profiles")
		},
	}
}

func normalizeProfile(p *record.Profile) {
	if p.Config == nil {
		p.Config = map[string]string{}
	}
	if p.Devices == nil {
		p.Devices = map[string]map[string]string{}
	}
	p.CreatedAt = p.CreatedAt.UTC()
	p.UpdatedAt = p.UpdatedAt.UTC()
}

// CreateProfile stores a profile.
func (s *sqlStore) CreateProfile(ctx context.Context, p *record.Profile) error {
	if p == nil || p.Name == "" {
		return fmt.Errorf("creating profile: a name is required: %w", ErrInvalid)
	}
	normalizeProfile(p)
	if p.CreatedAt.IsZero() {
		p.CreatedAt = time.Now().UTC()
	}
	p.UpdatedAt = p.CreatedAt
	row := profileRow(*p)
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		row.ID = 0
		return tx.Create(&row).Error
	})
	if err != nil {
		p.ID = 0
		return fmt.Errorf("creating profile %q: %w", p.Name, translate(err))
	}
	p.ID = row.ID
	return nil
}

// Profile returns one profile.
func (s *sqlStore) Profile(ctx context.Context, name string) (*record.Profile, error) {
	var row profileRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("name = ?", name).Take(&row).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting profile %q: %w", name, translate(err))
	}
	out := row.record()
	normalizeProfile(out)
	return out, nil
}

// Profiles lists every profile by name.
func (s *sqlStore) Profiles(ctx context.Context) ([]*record.Profile, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing profiles: %w", err)
	}
	var rows []*profileRow
	if err := rd.Order("name").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing profiles: %w", translate(err))
	}
	out := make([]*record.Profile, len(rows))
	for i, r := range rows {
		out[i] = r.record()
		normalizeProfile(out[i])
	}
	return out, nil
}

// UpdateProfile saves a profile's description, config and devices.
func (s *sqlStore) UpdateProfile(ctx context.Context, p *record.Profile) error {
	normalizeProfile(p)
	p.UpdatedAt = time.Now().UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&profileRow{}).Where("name = ?", p.Name).
			Select("description", "config", "devices", "updated_at").
			Updates(&profileRow{Description: p.Description, Config: p.Config, Devices: p.Devices, UpdatedAt: p.UpdatedAt}))
	})
	if err != nil {
		return fmt.Errorf("updating profile %q: %w", p.Name, translate(err))
	}
	return nil
}

// RenameProfile renames a profile and the references of the instances
// that use it, in one transaction.
func (s *sqlStore) RenameProfile(ctx context.Context, oldName, newName string) error {
	if newName == "" {
		return fmt.Errorf("renaming profile %q: no new name: %w", oldName, ErrInvalid)
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		if err := affectedOne(tx.Model(&profileRow{}).Where("name = ?", oldName).Update("name", newName)); err != nil {
			return err
		}
		var ins []*instanceRow
		if err := tx.Select("id", "profiles").Find(&ins).Error; err != nil {
			return err
		}
		for _, in := range ins {
			changed := false
			for i, p := range in.Profiles {
				if p == oldName {
					in.Profiles[i] = newName
					changed = true
				}
			}
			if changed {
				if err := tx.Model(&instanceRow{ID: in.ID}).Select("profiles").Updates(&instanceRow{Profiles: in.Profiles}).Error; err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("renaming profile %q to %q: %w", oldName, newName, translate(err))
	}
	return nil
}

// DeleteProfile removes a profile.
func (s *sqlStore) DeleteProfile(ctx context.Context, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("name = ?", name).Delete(&profileRow{}))
	})
	if err != nil {
		return fmt.Errorf("deleting profile %q: %w", name, translate(err))
	}
	return nil
}

// SetInstanceProfiles replaces an instance's profiles.
func (s *sqlStore) SetInstanceProfiles(ctx context.Context, id int64, profiles []string) error {
	if profiles == nil {
		profiles = []string{}
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&instanceRow{ID: id}).Select("profiles").Updates(&instanceRow{Profiles: profiles}))
	})
	if err != nil {
		return fmt.Errorf("setting the profiles of instance %d: %w", id, translate(err))
	}
	return nil
}
