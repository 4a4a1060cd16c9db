package db

import "time"

// Image is one disk image of the host's image store. Its files live in the
// state directory under images/ (named by fingerprint); the row holds what
// the store knows about them.
type Image struct {
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

// ImageAlias is a name for an image.
type ImageAlias struct {
	ID          int64  `gorm:"primaryKey"`
	Name        string `gorm:"uniqueIndex:idx_image_aliases_name;size:255;not null"`
	ImageID     int64  `gorm:"index:idx_image_aliases_image;not null"`
	Description string `gorm:"type:text"`
}
