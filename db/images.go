package db

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/images"
)

var _ images.MetadataStore = (*sqlStore)(nil)

// CreateImage stores an image and optionally its first alias.
func (s *sqlStore) CreateImage(ctx context.Context, im *images.Image, alias string) error {
	if im == nil || len(im.Fingerprint) != hashLen || (im.Format != "raw" && im.Format != "qcow2") {
		return fmt.Errorf("creating image: a SHA-256 fingerprint and a format (raw, qcow2) are required: %w", ErrInvalid)
	}
	if err := checkColumns(column{"file name", im.Filename, 255}, column{"alias", alias, 255}); err != nil {
		return fmt.Errorf("creating image %s: %w", im.Fingerprint, err)
	}
	for k, v := range im.Properties {
		if err := checkColumns(column{"property name", k, 0}, column{"property " + k, v, 0}); err != nil {
			return fmt.Errorf("creating image %s: %w", im.Fingerprint, err)
		}
	}
	if im.Properties == nil {
		im.Properties = map[string]string{}
	}
	im.CreatedAt = im.CreatedAt.UTC()
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		row := imageRowOf(im)
		if err := tx.Create(row).Error; err != nil {
			return err
		}
		if alias == "" {
			return nil
		}
		return tx.Create(&imageAliasRow{Name: alias, ImageID: row.ID}).Error
	})
	if err != nil {
		return fmt.Errorf("creating image %s: %w", im.Fingerprint, translate(err))
	}
	return nil
}

// Image returns one image.
func (s *sqlStore) Image(ctx context.Context, fingerprint string) (*images.Image, error) {
	var out imageRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("fingerprint = ?", fingerprint).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting image %s: %w", fingerprint, translate(err))
	}
	return out.image(), nil
}

// Images lists the images.
func (s *sqlStore) Images(ctx context.Context) ([]*images.Image, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var rows []*imageRow
	if err := rd.Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing images: %w", translate(err))
	}
	out := make([]*images.Image, len(rows))
	for i, r := range rows {
		out[i] = r.image()
	}
	return out, nil
}

// DeleteImage removes an image and its aliases.
func (s *sqlStore) DeleteImage(ctx context.Context, fingerprint string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var im imageRow
		if err := tx.Where("fingerprint = ?", fingerprint).Take(&im).Error; err != nil {
			return err
		}
		if err := tx.Where("image_id = ?", im.ID).Delete(&imageAliasRow{}).Error; err != nil {
			return err
		}
		return tx.Delete(&imageRow{}, im.ID).Error
	})
	if err != nil {
		return fmt.Errorf("deleting image %s: %w", fingerprint, translate(err))
	}
	return nil
}

// CreateImageAlias names an image.
func (s *sqlStore) CreateImageAlias(ctx context.Context, name, fingerprint, description string) error {
	if name == "" {
		return fmt.Errorf("creating image alias: a name is required: %w", ErrInvalid)
	}
	if err := checkColumns(column{"alias", name, 255}, column{"description", description, 0}); err != nil {
		return fmt.Errorf("creating image alias %q: %w", name, err)
	}
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var im imageRow
		if err := tx.Where("fingerprint = ?", fingerprint).Take(&im).Error; err != nil {
			return fmt.Errorf("image %s: %w", fingerprint, translate(err))
		}
		return tx.Create(&imageAliasRow{Name: name, ImageID: im.ID, Description: description}).Error
	})
	if err != nil {
		return fmt.Errorf("creating image alias %q: %w", name, translate(err))
	}
	return nil
}

// aliasRow is an alias joined with its image's fingerprint.
type aliasRow struct {
	Name        string
	Description string
	Fingerprint string
}

// alias is the row's core/images Alias.
func (r *aliasRow) alias() *images.Alias {
	return &images.Alias{Name: r.Name, Description: r.Description, Target: r.Fingerprint}
}

func (s *sqlStore) aliasRows(ctx context.Context, name string) ([]aliasRow, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	q := rd.Table("image_aliases").Select("image_aliases.name, image_aliases.description, images.fingerprint").
		Joins("JOIN images ON images.id = image_aliases.image_id")
	if name != "" {
		q = q.Where("image_aliases.name = ?", name)
	}
	var rows []aliasRow
	if err := q.Order("image_aliases.name").Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return rows, nil
}

// ImageAlias returns one alias.
func (s *sqlStore) ImageAlias(ctx context.Context, name string) (*images.Alias, error) {
	if name == "" {
		return nil, fmt.Errorf("getting image alias: a name is required: %w", ErrInvalid)
	}
	rows, err := s.aliasRows(ctx, name)
	if err == nil && len(rows) == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("getting image alias %q: %w", name, err)
	}
	return rows[0].alias(), nil
}

// ImageAliases lists the aliases.
func (s *sqlStore) ImageAliases(ctx context.Context) ([]*images.Alias, error) {
	rows, err := s.aliasRows(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing image aliases: %w", err)
	}
	out := make([]*images.Alias, len(rows))
	for i := range rows {
		out[i] = rows[i].alias()
	}
	return out, nil
}

// DeleteImageAlias removes an alias.
func (s *sqlStore) DeleteImageAlias(ctx context.Context, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("name = ?", name).Delete(&imageAliasRow{}))
	})
	if err != nil {
		return fmt.Errorf("deleting image alias %q: %w", name, translate(err))
	}
	return nil
}

// SetImagePublic sets an image's public flag.
func (s *sqlStore) SetImagePublic(ctx context.Context, fingerprint string, public bool) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&imageRow{}).Where("fingerprint = ?", fingerprint).Update("public", public))
	})
	if err != nil {
		return fmt.Errorf("setting image %s public=%t: %w", fingerprint, public, translate(err))
	}
	return nil
}
