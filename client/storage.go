package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

func volumePath(pool string, sub ...string) string {
	p := "/1.0/storage-pools/" + url.PathEscape(pool) + "/volumes/custom"
	for _, s := range sub {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// StoragePools lists the storage pools.
func (c *Client) StoragePools(ctx context.Context) ([]api.StoragePool, error) {
	var out []api.StoragePool
	if err := c.do(ctx, http.MethodGet, "/1.0/storage-pools", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// StorageVolumes lists a pool's custom volumes.
func (c *Client) StorageVolumes(ctx context.Context, pool string) ([]api.StorageVolume, error) {
	var out []api.StorageVolume
	if err := c.do(ctx, http.MethodGet, volumePath(pool), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// StorageVolume returns a custom volume.
func (c *Client) StorageVolume(ctx context.Context, pool, name string) (*api.StorageVolume, error) {
	var out api.StorageVolume
	if err := c.do(ctx, http.MethodGet, volumePath(pool, name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateStorageVolume creates a custom volume.
func (c *Client) CreateStorageVolume(ctx context.Context, pool string, req api.StorageVolumesPost) (*api.StorageVolume, error) {
	var out api.StorageVolume
	if err := c.do(ctx, http.MethodPost, volumePath(pool), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteStorageVolume deletes a custom volume and its snapshots.
func (c *Client) DeleteStorageVolume(ctx context.Context, pool, name string) error {
	return c.do(ctx, http.MethodDelete, volumePath(pool, name), nil, nil, nil)
}

// StorageVolumeSnapshots lists a volume's snapshots.
func (c *Client) StorageVolumeSnapshots(ctx context.Context, pool, name string) ([]api.StorageVolume, error) {
	var out []api.StorageVolume
	if err := c.do(ctx, http.MethodGet, volumePath(pool, name, "snapshots"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateStorageVolumeSnapshot snapshots a volume.
func (c *Client) CreateStorageVolumeSnapshot(ctx context.Context, pool, name, snapshot string) (*api.StorageVolume, error) {
	var out api.StorageVolume
	if err := c.do(ctx, http.MethodPost, volumePath(pool, name, "snapshots"), nil, api.StorageVolumeSnapshotsPost{Name: snapshot}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteStorageVolumeSnapshot deletes a snapshot.
func (c *Client) DeleteStorageVolumeSnapshot(ctx context.Context, pool, name, snapshot string) error {
	return c.do(ctx, http.MethodDelete, volumePath(pool, name, "snapshots", snapshot), nil, nil, nil)
}
