package adminapi

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// Storage is the storage service behind the /1.0/storage-pools routes
// (*storage.Service).
type Storage interface {
	Pools() []storage.Pool
	GetPool(name string) (*storage.Pool, error)
	Volumes(ctx context.Context, pool string) ([]*storage.Volume, error)
	Volume(ctx context.Context, pool, name string) (*storage.Volume, error)
	CreateVolume(ctx context.Context, pool, name, contentType, description string, config map[string]string) (*storage.Volume, error)
	UpdateVolume(ctx context.Context, pool, name, description string, config map[string]string) (*storage.Volume, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	CreateSnapshot(ctx context.Context, pool, volume, snapshot, description string) (*storage.Volume, error)
	Snapshots(ctx context.Context, pool, volume string) ([]*storage.Volume, error)
}

var _ Storage = (*storage.Service)(nil)

// registerStorage adds the storage routes to v1.
func (a *API) registerStorage(v1 fiber.Router) {
	const vol = "/storage-pools/:pool/volumes/custom/:volume"
	pool, volume, snap := poolParam, volumeParam, volumeSnapshotParam
	v1.Get("/storage-pools", a.ok(httpwrap.With(a.storage, a.listPools)))
	v1.Get("/storage-pools/:pool", a.ok(httpwrap.With(a.storage, a.getPool), pool))
	v1.Get("/storage-pools/:pool/volumes/custom", a.ok(httpwrap.With(a.storage, a.listVolumes), pool))
	v1.Post("/storage-pools/:pool/volumes/custom", a.created(httpwrap.With(a.storage, withBody(a.createVolume)), pool))
	v1.Get(vol, a.ok(httpwrap.With(a.storage, a.getVolume), pool, volume))
	v1.Patch(vol, a.ok(httpwrap.With(a.storage, withBody(a.patchVolume)), pool, volume))
	v1.Delete(vol, a.ok(httpwrap.With(a.storage, a.deleteVolume), pool, volume))
	v1.Get(vol+"/snapshots", a.ok(httpwrap.With(a.storage, a.listVolumeSnapshots), pool, volume))
	v1.Post(vol+"/snapshots", a.created(httpwrap.With(a.storage, withBody(a.createVolumeSnapshot)), pool, volume))
	v1.Get(vol+"/snapshots/:snapshot", a.ok(httpwrap.With(a.storage, a.getVolumeSnapshot), pool, volume, snap))
	v1.Delete(vol+"/snapshots/:snapshot", a.ok(httpwrap.With(a.storage, a.deleteVolumeSnapshot), pool, volume, snap))
}

func (a *API) storage() (Storage, error) {
	if a.cfg.Storage == nil {
		return nil, fmt.Errorf("storage is not configured on this daemon: %w", errdefs.ErrNotSupported)
	}
	return a.cfg.Storage, nil
}

func wirePool(p storage.Pool) api.StoragePool {
	return api.StoragePool{Name: p.Name, Driver: p.Driver, Status: p.Status, Description: p.Description, Source: p.Source}
}

// WireVolume converts a storage volume to its wire form.
func WireVolume(v *storage.Volume) api.StorageVolume {
	return api.StorageVolume{Pool: v.Pool, Name: v.Name, Type: v.Type, ContentType: v.ContentType, Description: v.Description,
		Config: v.Config, CreatedAt: v.CreatedAt, Location: v.Location}
}

// wireVolumeOf answers a volume, wireVolumesOf a list of them.
var (
	wireVolumeOf  = wired(WireVolume)
	wireVolumesOf = wiredEach(WireVolume)
)

// listPools answers GET /1.0/storage-pools.
func (a *API) listPools(_ *request, st Storage) (any, error) {
	return wiredEach(wirePool)(st.Pools(), nil)
}

// getPool answers GET /1.0/storage-pools/{pool}.
func (a *API) getPool(r *request, st Storage) (any, error) {
	p, err := st.GetPool(r.Param("pool"))
	if err != nil {
		return nil, err
	}
	return wirePool(*p), nil
}

// listVolumes answers GET /1.0/storage-pools/{pool}/volumes/custom.
func (a *API) listVolumes(r *request, st Storage) (any, error) {
	return wireVolumesOf(st.Volumes(r.UserContext(), r.Param("pool")))
}

// createVolume answers POST /1.0/storage-pools/{pool}/volumes/custom with
// 201 and the volume.
func (a *API) createVolume(r *request, st Storage, req *api.StorageVolumesPost) (any, error) {
	pool := r.Param("pool")
	v, err := st.CreateVolume(r.UserContext(), pool, req.Name, req.ContentType, req.Description, req.Config)
	if err != nil {
		return nil, err
	}
	a.log.Info("storage volume created", "pool", pool, "volume", v.Name, "by", requestor(r.Ctx).Describe())
	return WireVolume(v), nil
}

// getVolume answers GET /1.0/storage-pools/{pool}/volumes/custom/{volume}.
func (a *API) getVolume(r *request, st Storage) (any, error) {
	return wireVolumeOf(st.Volume(r.UserContext(), r.Param("pool"), r.Param("volume")))
}

// patchVolume answers PATCH /1.0/storage-pools/{pool}/volumes/custom/{volume}.
func (a *API) patchVolume(r *request, st Storage, req *api.StorageVolumePut) (any, error) {
	return wireVolumeOf(st.UpdateVolume(r.UserContext(), r.Param("pool"), r.Param("volume"), req.Description, req.Config))
}

// deleteVolume answers DELETE /1.0/storage-pools/{pool}/volumes/custom/{volume}.
func (a *API) deleteVolume(r *request, st Storage) (any, error) {
	pool, vol := r.Param("pool"), r.Param("volume")
	if err := st.DeleteVolume(r.UserContext(), pool, vol); err != nil {
		return nil, err
	}
	a.log.Info("storage volume deleted", "pool", pool, "volume", vol, "by", requestor(r.Ctx).Describe())
	return nil, nil
}

// listVolumeSnapshots answers GET .../volumes/custom/{volume}/snapshots.
func (a *API) listVolumeSnapshots(r *request, st Storage) (any, error) {
	return wireVolumesOf(st.Snapshots(r.UserContext(), r.Param("pool"), r.Param("volume")))
}

// createVolumeSnapshot answers POST .../volumes/custom/{volume}/snapshots
// with 201 and the snapshot.
func (a *API) createVolumeSnapshot(r *request, st Storage, req *api.StorageVolumeSnapshotsPost) (any, error) {
	return wireVolumeOf(st.CreateSnapshot(r.UserContext(), r.Param("pool"), r.Param("volume"), req.Name, req.Description))
}

// volumeSnapshot is the storage name of the route's snapshot: VOLUME/SNAPSHOT.
func volumeSnapshot(r *request) string { return r.Param("volume") + "/" + r.Param("snapshot") }

// getVolumeSnapshot answers GET .../volumes/custom/{volume}/snapshots/{snapshot}.
func (a *API) getVolumeSnapshot(r *request, st Storage) (any, error) {
	return wireVolumeOf(st.Volume(r.UserContext(), r.Param("pool"), volumeSnapshot(r)))
}

// deleteVolumeSnapshot answers DELETE .../volumes/custom/{volume}/snapshots/{snapshot}.
func (a *API) deleteVolumeSnapshot(r *request, st Storage) (any, error) {
	return nil, st.DeleteVolume(r.UserContext(), r.Param("pool"), volumeSnapshot(r))
}
