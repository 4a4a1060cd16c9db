package api

import "time"

// StoragePool is a storage pool (GET /1.0/storage-pools).
type StoragePool struct {
	Name        string `json:"name"`
	Driver      string `json:"driver"`
	Status      string `json:"status"`
	Description string `json:"description"`
	Source      string `json:"source"`
}

// StorageVolume is a custom volume or a snapshot ("VOLUME/SNAPSHOT").
type StorageVolume struct {
	Pool        string            `json:"pool"`
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	ContentType string            `json:"content_type"`
	Description string            `json:"description"`
	Config      map[string]string `json:"config"`
	CreatedAt   time.Time         `json:"created_at"`
	Location    string            `json:"location"`
}

// StorageVolumesPost is the body of POST
// /1.0/storage-pools/{pool}/volumes/custom.
type StorageVolumesPost struct {
	Name        string            `json:"name"`
	ContentType string            `json:"content_type,omitempty"` // "block" (default)
	Description string            `json:"description,omitempty"`
	Config      map[string]string `json:"config,omitempty"` // size
}

// StorageVolumePut is the body of PATCH
// /1.0/storage-pools/{pool}/volumes/custom/{name}.
type StorageVolumePut struct {
	Description string            `json:"description"`
	Config      map[string]string `json:"config,omitempty"`
}

// StorageVolumeSnapshotsPost is the body of POST
// /1.0/storage-pools/{pool}/volumes/custom/{name}/snapshots.
type StorageVolumeSnapshotsPost struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}
