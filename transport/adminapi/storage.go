package adminapi

import (
	"context"
	"fmt"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
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
	v1.Get("/storage-pools", a.listPools)
	v1.Get("/storage-pools/:pool", a.getPool)
	v1.Get("/storage-pools/:pool/volumes/custom", a.listVolumes)
	v1.Post("/storage-pools/:pool/volumes/custom", a.createVolume)
	v1.Get(vol, a.getVolume)
	v1.Patch(vol, a.patchVolume)
	v1.Delete(vol, a.deleteVolume)
	v1.Get(vol+"/snapshots", a.listVolumeSnapshots)
	v1.Post(vol+"/snapshots", a.createVolumeSnapshot)
	v1.Get(vol+"/snapshots/:snapshot", a.getVolumeSnapshot)
	v1.Delete(vol+"/snapshots/:snapshot", a.deleteVolumeSnapshot)
}

func (a *API) storage() (Storage, error) {
	if a.cfg.Storage == nil {
		return nil, fmt.Errorf("storage is not configured on this daemon: %w", errdefs.ErrNotSupported)
	}
	return a.cfg.Storage, nil
}

func param(c *fiber.Ctx, key string) (string, error) {
	raw := c.Params(key)
	v, err := url.PathUnescape(raw)
	if err != nil || v == "" {
		return "", badRequest("invalid %s %q", key, raw)
	}
	return v, nil
}

func wirePool(p storage.Pool) api.StoragePool {
	return api.StoragePool{Name: p.Name, Driver: p.Driver, Status: p.Status, Description: p.Description, Source: p.Source}
}

// WireVolume converts a storage volume to its wire form.
func WireVolume(v *storage.Volume) api.StorageVolume {
	return api.StorageVolume{Pool: v.Pool, Name: v.Name, Type: v.Type, ContentType: v.ContentType, Description: v.Description,
		Config: v.Config, CreatedAt: v.CreatedAt, Location: v.Location}
}

func wireVolumes(vs []*storage.Volume) []api.StorageVolume {
	out := make([]api.StorageVolume, 0, len(vs))
	for _, v := range vs {
		out = append(out, WireVolume(v))
	}
	return out
}

func (a *API) listPools(c *fiber.Ctx) error {
	st, err := a.storage()
	if err != nil {
		return err
	}
	out := []api.StoragePool{}
	for _, p := range st.Pools() {
		out = append(out, wirePool(p))
	}
	return sync200(c, out)
}

func (a *API) getPool(c *fiber.Ctx) error {
	st, err := a.storage()
	if err != nil {
		return err
	}
	name, err := param(c, "pool")
	if err != nil {
		return err
	}
	p, err := st.GetPool(name)
	if err != nil {
		return err
	}
	return sync200(c, wirePool(*p))
}

func (a *API) listVolumes(c *fiber.Ctx) error {
	st, err := a.storage()
	if err != nil {
		return err
	}
	pool, err := param(c, "pool")
	if err != nil {
		return err
	}
	vs, err := st.Volumes(c.UserContext(), pool)
	if err != nil {
		return err
	}
	return sync200(c, wireVolumes(vs))
}

func (a *API) createVolume(c *fiber.Ctx) error {
	st, err := a.storage()
	if err != nil {
		return err
	}
	pool, err := param(c, "pool")
	if err != nil {
		return err
	}
	var req api.StorageVolumesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	v, err := st.CreateVolume(c.UserContext(), pool, req.Name, req.ContentType, req.Description, req.Config)
	if err != nil {
		return err
	}
	a.log.Info("storage volume created", "pool", pool, "volume", v.Name, "by", requestor(c).Describe())
	return syncCreated(c, WireVolume(v))
}

func (a *API) volumeParams(c *fiber.Ctx) (Storage, string, string, error) {
	st, err := a.storage()
	if err != nil {
		return nil, "", "", err
	}
	pool, err := param(c, "pool")
	if err != nil {
		return nil, "", "", err
	}
	vol, err := param(c, "volume")
	if err != nil {
		return nil, "", "", err
	}
	if err := storage.ValidateName("volume", vol); err != nil {
		return nil, "", "", err
	}
	return st, pool, vol, nil
}

func (a *API) getVolume(c *fiber.Ctx) error {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return err
	}
	v, err := st.Volume(c.UserContext(), pool, vol)
	if err != nil {
		return err
	}
	return sync200(c, WireVolume(v))
}

func (a *API) patchVolume(c *fiber.Ctx) error {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return err
	}
	var req api.StorageVolumePut
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	v, err := st.UpdateVolume(c.UserContext(), pool, vol, req.Description, req.Config)
	if err != nil {
		return err
	}
	return sync200(c, WireVolume(v))
}

func (a *API) deleteVolume(c *fiber.Ctx) error {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return err
	}
	if err := st.DeleteVolume(c.UserContext(), pool, vol); err != nil {
		return err
	}
	a.log.Info("storage volume deleted", "pool", pool, "volume", vol, "by", requestor(c).Describe())
	return sync200(c, nil)
}

func (a *API) listVolumeSnapshots(c *fiber.Ctx) error {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return err
	}
	vs, err := st.Snapshots(c.UserContext(), pool, vol)
	if err != nil {
		return err
	}
	return sync200(c, wireVolumes(vs))
}

func (a *API) createVolumeSnapshot(c *fiber.Ctx) error {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return err
	}
	var req api.StorageVolumeSnapshotsPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	v, err := st.CreateSnapshot(c.UserContext(), pool, vol, req.Name, req.Description)
	if err != nil {
		return err
	}
	return syncCreated(c, WireVolume(v))
}

func (a *API) snapshotParam(c *fiber.Ctx) (Storage, string, string, error) {
	st, pool, vol, err := a.volumeParams(c)
	if err != nil {
		return nil, "", "", err
	}
	snap, err := param(c, "snapshot")
	if err != nil {
		return nil, "", "", err
	}
	if err := storage.ValidateName("snapshot", snap); err != nil {
		return nil, "", "", err
	}
	return st, pool, vol + "/" + snap, nil
}

func (a *API) getVolumeSnapshot(c *fiber.Ctx) error {
	st, pool, name, err := a.snapshotParam(c)
	if err != nil {
		return err
	}
	v, err := st.Volume(c.UserContext(), pool, name)
	if err != nil {
		return err
	}
	return sync200(c, WireVolume(v))
}

func (a *API) deleteVolumeSnapshot(c *fiber.Ctx) error {
	st, pool, name, err := a.snapshotParam(c)
	if err != nil {
		return err
	}
	if err := st.DeleteVolume(c.UserContext(), pool, name); err != nil {
		return err
	}
	return sync200(c, nil)
}
