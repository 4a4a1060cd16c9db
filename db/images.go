package db

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// ImageStore keeps the image store's metadata: images by fingerprint and
// their aliases. The Store returned by Open implements it. All methods are
// safe for concurrent use; a nil return means the change is durable.
type ImageStore interface {
	// CreateImage stores im (sets im.ID) and, when alias is not "", an alias
	// for it in the same transaction; ErrAlreadyExists if the fingerprint or
	// the alias exists already.
	CreateImage(ctx context.Context, im *Image, alias string) error
	// Image returns the image with this fingerprint.
	Image(ctx context.Context, fingerprint string) (*Image, error)
	// Images lists the images, oldest first.
	Images(ctx context.Context) ([]*Image, error)
	// SetImagePublic sets the public flag of the image with this
	// fingerprint; ErrNotFound if there is none.
	SetImagePublic(ctx context.Context, fingerprint string, public bool) error
	// DeleteImage removes the image with this fingerprint and its aliases.
	DeleteImage(ctx context.Context, fingerprint string) error
	// CreateImageAlias names the image with fingerprint; ErrNotFound if
	// there is no such image, ErrAlreadyExists if the name is taken.
	CreateImageAlias(ctx context.Context, name, fingerprint, description string) error
	// ImageAlias returns the alias called name and its image's fingerprint.
	ImageAlias(ctx context.Context, name string) (*ImageAlias, string, error)
	// ImageAliases lists the aliases by name, each with its image's fingerprint.
	ImageAliases(ctx context.Context) ([]*ImageAlias, []string, error)
	// DeleteImageAlias removes the alias called name.
	DeleteImageAlias(ctx context.Context, name string) error
}

var _ ImageStore = (*sqlStore)(nil)

// CreateImage stores an image and optionally its first alias.
func (s *sqlStore) CreateImage(ctx context.Context, im *Image, alias string) error {
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
		im.ID = 0
		if err := tx.Create(im).Error; err != nil {
			return err
		}
		if alias == "" {
			return nil
		}
		return tx.Create(&ImageAlias{Name: alias, ImageID: im.ID}).Error
	})
	if err != nil {
		im.ID = 0
		return fmt.Errorf("creating image %s: %w", im.Fingerprint, translate(err))
	}
	return nil
}

// Image returns one image.
func (s *sqlStore) Image(ctx context.Context, fingerprint string) (*Image, error) {
	var out Image
	rd, err := s.reader(ctx)
	if err == nil {
		err = rd.Where("fingerprint = ?", fingerprint).Take(&out).Error
	}
	if err != nil {
		return nil, fmt.Errorf("getting image %s: %w", fingerprint, translate(err))
	}
	out.CreatedAt = out.CreatedAt.UTC()
	return &out, nil
}

// Images lists the images.
func (s *sqlStore) Images(ctx context.Context) ([]*Image, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var out []*Image
	if err := rd.Order("created_at, id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing images: %w", translate(err))
	}
	for _, im := range out {
		im.CreatedAt = im.CreatedAt.UTC()
	}
	return out, nil
}

// DeleteImage removes an image and its aliases.
func (s *sqlStore) DeleteImage(ctx context.Context, fingerprint string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var im Image
		if err := tx.Where("fingerprint = ?", fingerprint).Take(&im).Error; err != nil {
			return err
		}
		if err := tx.Where("image_id = ?", im.ID).Delete(&ImageAlias{}).Error; err != nil {
			return err
		}
		return tx.Delete(&Image{}, im.ID).Error
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
		var im Image
		if err := tx.Where("fingerprint = ?", fingerprint).Take(&im).Error; err != nil {
			return fmt.Errorf("image %s: %w", fingerprint, translate(err))
		}
		return tx.Create(&ImageAlias{Name: name, ImageID: im.ID, Description: description}).Error
	})
	if err != nil {
		return fmt.Errorf("creating image alias %q: %w", name, translate(err))
	}
	return nil
}

// aliasRow is an alias joined with its image's fingerprint.
type aliasRow struct {
	ImageAlias
	Fingerprint string
}

func (s *sqlStore) aliasRows(ctx context.Context, name string) ([]aliasRow, error) {
	rd, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	q := rd.Table("image_aliases").Select("image_aliases.*, images.fingerprint").
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
func (s *sqlStore) ImageAlias(ctx context.Context, name string) (*ImageAlias, string, error) {
	if name == "" {
		return nil, "", fmt.Errorf("getting image alias: a name is required: %w", ErrInvalid)
	}
	rows, err := s.aliasRows(ctx, name)
	if err == nil && len(rows) == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("getting image alias %q: %w", name, err)
	}
	a := rows[0].ImageAlias
	return &a, rows[0].Fingerprint, nil
}

// ImageAliases lists the aliases.
func (s *sqlStore) ImageAliases(ctx context.Context) ([]*ImageAlias, []string, error) {
	rows, err := s.aliasRows(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("listing image aliases: %w", err)
	}
	out, fps := make([]*ImageAlias, len(rows)), make([]string, len(rows))
	for i := range rows {
		a := rows[i].ImageAlias
		out[i], fps[i] = &a, rows[i].Fingerprint
	}
	return out, fps, nil
}

// DeleteImageAlias removes an alias.
func (s *sqlStore) DeleteImageAlias(ctx context.Context, name string) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Where("name = ?", name).Delete(&ImageAlias{}))
	})
	if err != nil {
		return fmt.Errorf("deleting image alias %q: %w", name, translate(err))
	}
	return nil
}

// SetImagePublic sets an image's public flag.
func (s *sqlStore) SetImagePublic(ctx context.Context, fingerprint string, public bool) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return affectedOne(tx.Model(&Image{}).Where("fingerprint = ?", fingerprint).Update("public", public))
	})
	if err != nil {
		return fmt.Errorf("setting image %s public=%t: %w", fingerprint, public, translate(err))
	}
	return nil
}
