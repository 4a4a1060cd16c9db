package db

import (
	"time"

	"github.com/guestlink/guestlink/core/images"
)

// imageRow is the row of one disk image of the host's image store: the
// store's form of core/images' Image (its aliases are imageAliasRow rows).
type imageRow struct {
	ID          int64  `gorm:"primaryKey"`
	Fingerprint string `gorm:"uniqueIndex:idx_images_fingerprint;size:64;not null"` // SHA-256 of the disk file, lowercase hex
	Filename    string `gorm:"size:255;not null"`                                   // the name the file was imported under
	Size        int64  `gorm:"not null"`                                            // bytes of the disk file
	Format      string `gorm:"size:16;not null"`                                    // "raw" or "qcow2"
	// Kernel and Initrd are true when a kernel (and initrd) for direct boot
	// were extracted from the image at import (files <fp>.kernel, <fp>.initrd).
	Kernel     bool              `gorm:"not null;default:false"`
	Initrd     bool              `gorm:"not null;default:false"`
	Properties map[string]string `gorm:"serializer:json;not null"` // os, release, build inputs, ...
	// Public is true when guests may download the image through devlxd
	// (LXD's public flag); false, the default, keeps it private.
	Public    bool      `gorm:"not null;default:false"`
	CreatedAt time.Time `gorm:"not null"`
}

// TableName is the table of images.
func (imageRow) TableName() string { return "images" }

// imageRowOf is im's row.
func imageRowOf(im *images.Image) *imageRow {
	return &imageRow{Fingerprint: im.Fingerprint, Filename: im.Filename, Size: im.Size, Format: im.Format, Kernel: im.Kernel,
		Initrd: im.Initrd, Properties: im.Properties, Public: im.Public, CreatedAt: im.CreatedAt}
}

// image is the row's core/images Image (without aliases).
func (r *imageRow) image() *images.Image {
	return &images.Image{Fingerprint: r.Fingerprint, Filename: r.Filename, Size: r.Size, Format: r.Format, Kernel: r.Kernel,
		Initrd: r.Initrd, Properties: r.Properties, Public: r.Public, CreatedAt: r.CreatedAt.UTC()}
}

// imageAliasRow is the row of a name for an image.
type imageAliasRow struct {
	ID          int64  `gorm:"primaryKey"`
	Name        string `gorm:"uniqueIndex:idx_image_aliases_name;size:255;not null"`
	ImageID     int64  `gorm:"index:idx_image_aliases_image;not null"`
	Description string `gorm:"type:text"`
}

// TableName is the table of image aliases.
func (imageAliasRow) TableName() string { return "image_aliases" }
