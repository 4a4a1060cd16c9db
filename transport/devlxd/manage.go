package devlxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
)

// Storage is the storage service behind the trusted volume routes
// (*storage.Service).
type Storage interface {
	// Pools lists the host's pools (their drivers are GET /1.0's
	// supported_storage_drivers).
	Pools() []storage.Pool
	GetPool(name string) (*storage.Pool, error)
	Volumes(ctx context.Context, pool string) ([]*storage.Volume, error)
	Volume(ctx context.Context, pool, name string) (*storage.Volume, error)
	CreateVolume(ctx context.Context, pool, name, contentType, description string, config map[string]string) (*storage.Volume, error)
	// CopyVolume creates name as a copy of source (a volume or a
	// "VOLUME/SNAPSHOT"), the same bytes.
	CopyVolume(ctx context.Context, pool, name, source, description string, config map[string]string) (*storage.Volume, error)
	UpdateVolume(ctx context.Context, pool, name, description string, config map[string]string) (*storage.Volume, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	CreateSnapshot(ctx context.Context, pool, volume, snapshot, description string) (*storage.Volume, error)
	// NextSnapshotName is the name of a snapshot made without one (snap0,
	// snap1, ... as LXD).
	NextSnapshotName(ctx context.Context, pool, volume string) (string, error)
	Snapshots(ctx context.Context, pool, volume string) ([]*storage.Volume, error)
}

var _ Storage = (*storage.Service)(nil)

// Devices changes instance devices (*instance.Manager).
type Devices interface {
	UpdateDevices(ctx context.Context, name string, u instance.DeviceUpdate, by events.Requestor) (*instance.Instance, error)
}

// Wire shapes of the trusted routes (LXD's devlxd storage objects).
type (
	wirePool struct {
		Name   string `json:"name"`
		Driver string `json:"driver"`
		Status string `json:"status"`
	}
	wireVolume struct {
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Pool        string            `json:"pool"`
		Type        string            `json:"type"`
		ContentType string            `json:"content_type"`
		Config      map[string]string `json:"config"`
		Location    string            `json:"location"`
	}
	wireSnapshot struct {
		Name        string            `json:"name"`
		Description string            `json:"description"`
		ContentType string            `json:"content_type"`
		Config      map[string]string `json:"config"`
	}
	volumePut struct {
		Config      map[string]string `json:"config"`
		Description string            `json:"description"`
	}
	volumesPost struct {
		volumePut
		Name        string `json:"name"`
		Type        string `json:"type"`
		ContentType string `json:"content_type"`
		Source      struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Pool     string `json:"pool"`
			Location string `json:"location"`
		} `json:"source"`
	}
	snapshotsPost struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	instancePut struct {
		Devices map[string]map[string]string `json:"devices"`
	}
)

// LXD's words on the volume routes: for a volume route of another type
// than custom, per route (its handlers say it each their own way).
const (
	msgOnlyCustom        = "Only custom storage volume requests are allowed"
	msgSnapshotsRead     = "Only snapshots from custom storage volumes can be retrieved"
	msgSnapshotsCreate   = "Only snapshots for custom storage volumes can be created"
	msgSnapshotsDelete   = "Only snapshots from custom storage volumes can be deleted"
	msgOnlyRecursive     = "Only recursive requests are currently supported"
	msgSourceNotFound    = "Source volume not found"
	msgStorageNotHere    = "Storage is not configured on this host"
	msgDevicesNotHere    = "Device changes are not configured on this host"
	msgOwnerCannotChange = "Volume owner cannot be changed"
)

// registerManagement adds the handlers behind the trusted gate.
func (s *Server) registerManagement() {
	const vol = "/1.0/storage-pools/:pool/volumes/:type/:volume"
	s.app.Patch("/1.0/instances/:name", s.managed(s.answer(s.patchInstance)))
	s.app.Get("/1.0/operations/:id/wait", s.waitOperation)
	s.app.Delete("/1.0/operations/:id", s.cancelOperation)
	s.app.Get("/1.0/storage-pools/:pool", s.manage(s.getPool))
	s.app.Get("/1.0/storage-pools/:pool/volumes", s.manage(s.listVolumes))
	s.app.Get("/1.0/storage-pools/:pool/volumes/:type", s.manage(s.listVolumes))
	s.app.Post("/1.0/storage-pools/:pool/volumes", s.manage(s.createVolume))
	s.app.Post("/1.0/storage-pools/:pool/volumes/:type", s.manage(s.createVolume))
	s.app.Get(vol, s.onVolume(msgOnlyCustom, false, s.getVolume))
	s.app.Put(vol, s.onVolume(msgOnlyCustom, false, s.putVolume))
	s.app.Patch(vol, s.onVolume(msgOnlyCustom, false, s.putVolume))
	s.app.Delete(vol, s.onVolume(msgOnlyCustom, false, s.deleteVolume))
	s.app.Get(vol+"/snapshots", s.onVolume(msgSnapshotsRead, true, s.listSnapshots))
	s.app.Post(vol+"/snapshots", s.onVolume(msgSnapshotsCreate, false, s.createSnapshot))
	s.app.Get(vol+"/snapshots/:snapshot", s.onVolume(msgSnapshotsRead, false, s.getSnapshot))
	s.app.Delete(vol+"/snapshots/:snapshot", s.onVolume(msgSnapshotsDelete, false, s.deleteSnapshot))
}

// reply is a management handler's answer: a value for the success
// envelope, and the ETag LXD sends with it ("" for none).
type reply struct {
	value any
	etag  string
}

// refusal is an answer given exactly: a status and LXD's message for it
// ("" is the status text).
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return fmt.Sprintf("%d %s", r.code, r.msg) }

// refuse returns the refusal code msg as an error of a management handler.
func refuse(code int, msg string) error { return &refusal{code: code, msg: msg} }

type (
	// replyFunc is a management handler.
	replyFunc func(c *fiber.Ctx) (reply, error)
	// storageFunc is a handler of a storage route.
	storageFunc func(c *fiber.Ctx, st Storage) (reply, error)
	// volumeFunc is a handler of a route of one volume the caller owns.
	volumeFunc func(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error)
)

// answer turns h into a fiber handler: a refusal is answered as it is, a
// service error by its kind (fail), a reply in the success envelope with
// its ETag header.
func (s *Server) answer(h replyFunc) fiber.Handler {
	return func(c *fiber.Ctx) error {
		r, err := h(c)
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			return sendError(c, ref.code, ref.msg)
		case err != nil:
			return s.fail(c, err)
		}
		if r.etag != "" {
			c.Set(fiber.HeaderETag, r.etag)
		}
		return sendSync(c, r.value)
	}
}

// manage wraps a storage handler: management enabled (else 403), storage
// configured on the host (else 501), then reply.
func (s *Server) manage(h storageFunc) fiber.Handler {
	return s.managed(s.answer(func(c *fiber.Ctx) (reply, error) {
		if s.cfg.Storage == nil {
			return reply{}, refuse(http.StatusNotImplemented, msgStorageNotHere)
		}
		return h(c, s.cfg.Storage)
	}))
}

// onVolume wraps a handler of one volume's route: the route's type must
// be custom (else 400 typeMsg), a recursive route wants ?recursion=1
// (else 501, checked before the volume as LXD; not for a VM, whose agent
// always asks recursively), and the volume must be the caller's (else
// 404, another identity's volume not revealed).
func (s *Server) onVolume(typeMsg string, recursive bool, h volumeFunc) fiber.Handler {
	return s.manage(func(c *fiber.Ctx, st Storage) (reply, error) {
		if t := c.Params("type"); t != "custom" {
			return reply{}, refuse(http.StatusBadRequest, typeMsg)
		}
		if recursive && !isRecursive(c) && !s.isVM(c) {
			// LXD's VM agent always asks the host recursively.
			return reply{}, refuse(http.StatusNotImplemented, msgOnlyRecursive)
		}
		v, err := s.ownedVolume(c, st, c.Params("pool"), c.Params("volume"))
		if err != nil {
			return reply{}, err
		}
		return h(c, st, v)
	})
}

func isRecursive(c *fiber.Ctx) bool {
	r := c.Query("recursion")
	return r != "" && r != "0"
}

// operation is LXD's answer to a change: a finished operation (Success,
// or Failure with a client error of the service); a server error is the
// error itself.
func (s *Server) operation(c *fiber.Ctx, err error) (reply, error) {
	if err != nil && errdefs.HTTPStatus(err) >= 500 {
		return reply{}, err
	}
	return reply{value: s.ops.finish(callerOf(c).UUID, err)}, nil
}

func ownerOf(c *fiber.Ctx) string { return auth.TypeDevlxd + "/" + trustedOf(c).Name }

// reqCtx is a handler's context: requestTimeout, and cancelled when the
// server shuts down (Shutdown).
func (s *Server) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.life, requestTimeout)
}

// fail answers a service error: its kind's status, its message for a
// client error.
func (s *Server) fail(c *fiber.Ctx, err error) error {
	code := errdefs.HTTPStatus(err)
	if code >= 500 {
		s.cfg.Logger.Error("devlxd: management request", "path", c.Path(), "err", err)
		return sendError(c, code, "")
	}
	if code == http.StatusNotFound {
		return sendError(c, code, s.notFoundText(c))
	}
	return sendError(c, code, err.Error())
}

// LXD's texts of the storage routes' errors (its database's not-found
// errors and its volume creation's conflict).
const (
	msgPoolNotFound   = "Storage pool not found"
	msgVolumeNotFound = "Storage volume not found"
	msgVolumeExists   = "Volume by that name already exists"
)

// notFoundText is LXD's text of a 404 on the route of c: LXD loads the
// route's pool first ("Storage pool not found"), then the volume or
// snapshot ("Storage volume not found"); other routes say "Not Found".
func (s *Server) notFoundText(c *fiber.Ctx) string {
	pool := c.Params("pool")
	if pool == "" || s.cfg.Storage == nil {
		return ""
	}
	if _, err := s.cfg.Storage.GetPool(pool); errors.Is(err, errdefs.ErrNotFound) {
		return msgPoolNotFound
	}
	if c.Params("volume") != "" {
		return msgVolumeNotFound
	}
	return ""
}

// decode decodes the body into v, or returns the 400 refusal of a body
// that is not JSON or not valid UTF-8 (LXD answers 500; see
// docs/devlxd.md).
func decode(c *fiber.Ctx, v any) error {
	if err := utf8check.Body(c.Body()); err != nil {
		return refuse(http.StatusBadRequest, err.Error())
	}
	if err := json.NewDecoder(bytes.NewReader(c.Body())).Decode(v); err != nil {
		return refuse(http.StatusBadRequest, "Failed decoding request body: "+err.Error())
	}
	return nil
}

func (s *Server) getPool(c *fiber.Ctx, st Storage) (reply, error) {
	p, err := st.GetPool(c.Params("pool"))
	if err != nil {
		return reply{}, err
	}
	return reply{value: wirePool{Name: p.Name, Driver: p.Driver, Status: p.Status}, etag: poolETag(p)}, nil
}

func toWire(v *storage.Volume) wireVolume {
	return wireVolume{Name: v.Name, Description: v.Description, Pool: v.Pool, Type: v.Type, ContentType: v.ContentType, Config: maps.Clone(v.Config), Location: v.Location}
}

// listVolumes answers GET .../volumes[/{type}]?recursion=1: the custom
// volumes the caller's identity owns. LXD's VM agent asks the host for
// them recursively and without the type whatever the guest asked, so a
// VM is refused neither a plain list nor a type.
func (s *Server) listVolumes(c *fiber.Ctx, st Storage) (reply, error) {
	vm := s.isVM(c)
	if !vm && !isRecursive(c) {
		return reply{}, refuse(http.StatusNotImplemented, msgOnlyRecursive)
	}
	if t := c.Params("type"); !vm && t != "" && t != "custom" {
		return reply{}, refuse(http.StatusBadRequest, msgOnlyCustom)
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	vols, err := st.Volumes(ctx, c.Params("pool"))
	if err != nil {
		return reply{}, err
	}
	out := []wireVolume{}
	for _, v := range vols {
		if v.Config[storage.KeyOwner] == ownerOf(c) {
			out = append(out, toWire(v))
		}
	}
	return reply{value: out}, nil
}

// createVolume answers POST .../volumes[/{type}]: a new custom volume owned
// by the caller's identity (whatever volatile.devlxd.owner the body says,
// as LXD), empty or a copy of a volume or snapshot the identity owns
// (source.type "copy").
func (s *Server) createVolume(c *fiber.Ctx, st Storage) (reply, error) {
	var req volumesPost
	if err := decode(c, &req); err != nil {
		return reply{}, err
	}
	volType := c.Params("type")
	if volType == "" {
		volType = "custom"
	}
	switch {
	case volType != "custom":
		return reply{}, refuse(http.StatusBadRequest, "Only custom storage volumes can be created")
	case req.Type != "" && req.Type != volType:
		return reply{}, refuse(http.StatusBadRequest, "URL volume type does not match the volume type in body")
	}
	cfg := maps.Clone(req.Config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	cfg[storage.KeyOwner] = ownerOf(c)
	ctx, cancel := s.reqCtx()
	defer cancel()
	var err error
	if req.Source.Type != "" {
		source, err := s.copySource(ctx, c, st, req.Source.Type, req.Source.Pool, req.Source.Name, c.Params("pool"))
		if err != nil {
			return reply{}, err
		}
		_, err = st.CopyVolume(ctx, c.Params("pool"), req.Name, source, req.Description, cfg)
		return s.created(c, err)
	}
	_, err = st.CreateVolume(ctx, c.Params("pool"), req.Name, req.ContentType, req.Description, cfg)
	return s.created(c, err)
}

// created is LXD's answer to a volume creation: a taken name is refused
// before an operation starts, other client errors are a failed operation.
func (s *Server) created(c *fiber.Ctx, err error) (reply, error) {
	switch {
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return reply{}, refuse(http.StatusConflict, msgVolumeExists)
	case errors.Is(err, errdefs.ErrNotFound):
		return reply{}, err
	}
	return s.operation(c, err)
}

// copySource checks the source of a copy as LXD: only type "copy", a
// volume name, a volume (the part before "/" of a snapshot) the caller's
// identity owns in the pool named (else 404 "Source volume not found",
// whether it is missing or another identity's). The copy is made in the
// route's pool: a source in another pool is refused (one pool per host).
func (s *Server) copySource(ctx context.Context, c *fiber.Ctx, st Storage, typ, pool, name, into string) (string, error) {
	if typ != "copy" {
		return "", refuse(http.StatusBadRequest, fmt.Sprintf("Invalid source type %q: Only source type %q is supported", typ, "copy"))
	}
	volName, _, _ := strings.Cut(name, "/")
	if volName == "" {
		return "", refuse(http.StatusBadRequest, "Source volume name must be provided when source is configured")
	}
	if _, err := s.ownedVolume(c, st, pool, volName); err != nil {
		var ref *refusal
		if !errors.As(err, &ref) && !errors.Is(err, errdefs.ErrNotFound) {
			return "", err
		}
		return "", refuse(http.StatusNotFound, msgSourceNotFound)
	}
	if name != volName {
		if _, err := st.Volume(ctx, pool, name); err != nil {
			return "", refuse(http.StatusNotFound, msgSourceNotFound)
		}
	}
	if pool != into {
		return "", refuse(http.StatusBadRequest, fmt.Sprintf("Copies between storage pools are not supported (source pool %q, target pool %q)", pool, into))
	}
	return name, nil
}

// ownedVolume returns volume name of pool when the caller's identity owns
// it; a volume it does not own is a 404 refusal that does not reveal it.
func (s *Server) ownedVolume(c *fiber.Ctx, st Storage, pool, name string) (*storage.Volume, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	v, err := st.Volume(ctx, pool, name)
	if err != nil {
		return nil, err
	}
	if v.Config[storage.KeyOwner] != ownerOf(c) {
		return nil, refuse(http.StatusNotFound, "")
	}
	return v, nil
}

func (s *Server) getVolume(_ *fiber.Ctx, _ Storage, v *storage.Volume) (reply, error) {
	return reply{value: toWire(v), etag: volumeETag(v)}, nil
}

// putVolume answers PUT and PATCH of a volume: the owner stays the
// caller's identity; an If-Match that is not the volume's ETag is 412 and
// nothing changes.
func (s *Server) putVolume(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	var req volumePut
	if err := decode(c, &req); err != nil {
		return reply{}, err
	}
	if o, set := req.Config[storage.KeyOwner]; set && o != ownerOf(c) {
		return reply{}, refuse(http.StatusBadRequest, msgOwnerCannotChange)
	}
	if err := checkIfMatch(c, volumeETag(v)); err != nil {
		return reply{}, err
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	_, err := st.UpdateVolume(ctx, v.Pool, v.Name, req.Description, req.Config)
	return s.operation(c, err)
}

func (s *Server) deleteVolume(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	return s.operation(c, st.DeleteVolume(ctx, v.Pool, v.Name))
}

func snapWire(v *storage.Volume, volume string) wireSnapshot {
	return wireSnapshot{Name: v.Name[len(volume)+1:], Description: v.Description, ContentType: v.ContentType, Config: maps.Clone(v.Config)}
}

func (s *Server) listSnapshots(_ *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	snaps, err := st.Snapshots(ctx, v.Pool, v.Name)
	if err != nil {
		return reply{}, err
	}
	out := []wireSnapshot{}
	for _, sn := range snaps {
		out = append(out, snapWire(sn, v.Name))
	}
	return reply{value: out}, nil
}

// createSnapshot answers POST .../snapshots: a snapshot named as asked,
// or as LXD names one without a name (snap0, snap1, ...).
func (s *Server) createSnapshot(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	var req snapshotsPost
	if err := decode(c, &req); err != nil {
		return reply{}, err
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	if req.Name == "" {
		name, err := st.NextSnapshotName(ctx, v.Pool, v.Name)
		if err != nil {
			return reply{}, err
		}
		req.Name = name
	}
	_, err := st.CreateSnapshot(ctx, v.Pool, v.Name, req.Name, req.Description)
	return s.operation(c, err)
}

func (s *Server) getSnapshot(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	sn, err := st.Volume(ctx, v.Pool, v.Name+"/"+c.Params("snapshot"))
	if err != nil {
		return reply{}, err
	}
	return reply{value: snapWire(sn, v.Name), etag: snapshotETag(sn)}, nil
}

func (s *Server) deleteSnapshot(c *fiber.Ctx, st Storage, v *storage.Volume) (reply, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	err := st.DeleteVolume(ctx, v.Pool, v.Name+"/"+c.Params("snapshot"))
	if errors.Is(err, errdefs.ErrNotFound) {
		return reply{}, refuse(http.StatusNotFound, "")
	}
	return s.operation(c, err)
}

// isVolumeDisk reports whether dev is a disk of a custom volume (LXD's
// rule for the devices devlxd may manage): type disk with a pool and a
// source.
func isVolumeDisk(dev map[string]string) bool {
	return dev["type"] == "disk" && dev["pool"] != "" && dev["source"] != ""
}

// patchInstance answers PATCH /1.0/instances/{name} as LXD: the caller's
// identity adds, changes (value: the whole device) and removes (value:
// null) the devices it owns. Removing a device it does not own (or one
// that is not there) is a no-op; adding or changing one that is not a
// disk of a volume, or that exists and is someone else's, is 403; a disk
// of a volume the identity does not own is 404 (not revealed). Devices
// added are owned by the identity (volatile.<dev>.devlxd.owner). On a
// running instance the backend hot-plugs them (or the change is refused
// precisely). An If-Match that is not the instance's ETag is 412 and
// nothing changes.
func (s *Server) patchInstance(c *fiber.Ctx) (reply, error) {
	if s.cfg.Devices == nil {
		return reply{}, refuse(http.StatusNotImplemented, msgDevicesNotHere)
	}
	inst, err := s.target(c)
	if err != nil {
		return reply{}, err
	}
	var req instancePut
	if err := decode(c, &req); err != nil {
		return reply{}, err
	}
	owner := ownerOf(c)
	u := instance.DeviceUpdate{Put: map[string]map[string]string{}, Config: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(req.Devices)) {
		dev := req.Devices[name]
		_, exists := inst.Devices[name]
		owned := exists && inst.Config[ownerKey(name)] == owner
		switch {
		case dev == nil && !owned:
			continue // not the identity's (or not there): nothing to do
		case dev == nil:
			u.Remove = append(u.Remove, name)
			continue
		case !isVolumeDisk(dev) || (exists && !owned):
			return reply{}, refuse(http.StatusForbidden, fmt.Sprintf("Not authorized to manage device %q", name))
		}
		if s.cfg.Storage == nil {
			return reply{}, refuse(http.StatusNotImplemented, msgStorageNotHere)
		}
		if _, err := s.ownedVolume(c, s.cfg.Storage, dev["pool"], dev["source"]); err != nil {
			return reply{}, s.volumeNotFound(dev["pool"], err)
		}
		if !exists || !maps.Equal(inst.Devices[name], dev) {
			u.Put[name] = maps.Clone(dev)
			u.Config[ownerKey(name)] = owner
		}
	}
	// LXD checks the tag in the instance update it then makes, nothing
	// to change included.
	if err := checkIfMatch(c, instanceETag(inst)); err != nil {
		return reply{}, err
	}
	if len(u.Put) == 0 && len(u.Remove) == 0 {
		return reply{}, nil
	}
	by := events.Requestor{Protocol: "devlxd", Username: owner, Address: string(c.Locals(localsIdentity).(linkhost.Identity).Link)}
	ctx, cancel := context.WithTimeout(s.life, 2*requestTimeout)
	defer cancel()
	if _, err := s.cfg.Devices.UpdateDevices(ctx, inst.Name, u, by); err != nil {
		return reply{}, err
	}
	return reply{}, nil
}

// volumeNotFound is LXD's refusal of a device's volume that is missing
// (its pool's or its own not-found text) or not the caller's (a bare 404);
// other errors pass.
func (s *Server) volumeNotFound(pool string, err error) error {
	if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if _, perr := s.cfg.Storage.GetPool(pool); perr != nil {
		return refuse(http.StatusNotFound, msgPoolNotFound)
	}
	return refuse(http.StatusNotFound, msgVolumeNotFound)
}
