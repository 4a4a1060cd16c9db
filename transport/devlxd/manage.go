package devlxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"

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
	GetPool(name string) (*storage.Pool, error)
	Volumes(ctx context.Context, pool string) ([]*storage.Volume, error)
	Volume(ctx context.Context, pool, name string) (*storage.Volume, error)
	CreateVolume(ctx context.Context, pool, name, contentType, description string, config map[string]string) (*storage.Volume, error)
	UpdateVolume(ctx context.Context, pool, name, description string, config map[string]string) (*storage.Volume, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	CreateSnapshot(ctx context.Context, pool, volume, snapshot, description string) (*storage.Volume, error)
	Snapshots(ctx context.Context, pool, volume string) ([]*storage.Volume, error)
}

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
			Name string `json:"name"`
			Type string `json:"type"`
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

// registerManagement adds the handlers behind the trusted gate.
func (s *Server) registerManagement() {
	const vol = "/1.0/storage-pools/:pool/volumes/:type/:volume"
	s.app.Patch("/1.0/instances/:name", s.managed(s.patchInstance))
	s.app.Get("/1.0/operations/:id/wait", s.waitOperation)
	s.app.Delete("/1.0/operations/:id", s.cancelOperation)
	s.app.Get("/1.0/storage-pools/:pool", s.managed(s.getPool))
	s.app.Get("/1.0/storage-pools/:pool/volumes", s.managed(s.listVolumes))
	s.app.Get("/1.0/storage-pools/:pool/volumes/:type", s.managed(s.listVolumes))
	s.app.Post("/1.0/storage-pools/:pool/volumes", s.managed(s.createVolume))
	s.app.Post("/1.0/storage-pools/:pool/volumes/:type", s.managed(s.createVolume))
	s.app.Get(vol, s.managed(s.getVolume))
	s.app.Put(vol, s.managed(s.putVolume))
	s.app.Patch(vol, s.managed(s.putVolume))
	s.app.Delete(vol, s.managed(s.deleteVolume))
	s.app.Get(vol+"/snapshots", s.managed(s.listSnapshots))
	s.app.Post(vol+"/snapshots", s.managed(s.createSnapshot))
	s.app.Get(vol+"/snapshots/:snapshot", s.managed(s.getSnapshot))
	s.app.Delete(vol+"/snapshots/:snapshot", s.managed(s.deleteSnapshot))
}

func ownerOf(c *fiber.Ctx) string { return auth.TypeDevlxd + "/" + trustedOf(c).Name }

func reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), requestTimeout)
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

// decodeJSON decodes the body into v; false when it answered 400 (a body
// that is not JSON, or not valid UTF-8).
func decodeJSON(c *fiber.Ctx, v any) bool {
	if err := utf8check.Body(c.Body()); err != nil {
		_ = sendError(c, http.StatusBadRequest, err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(c.Body()))
	if err := dec.Decode(v); err != nil {
		_ = sendError(c, http.StatusBadRequest, "Failed decoding request body: "+err.Error())
		return false
	}
	return true
}

func (s *Server) storageOr501(c *fiber.Ctx) (Storage, bool) {
	if s.cfg.Storage == nil {
		_ = sendError(c, http.StatusNotImplemented, "Storage is not configured on this host")
		return nil, false
	}
	return s.cfg.Storage, true
}

func (s *Server) getPool(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	p, err := st.GetPool(c.Params("pool"))
	if err != nil {
		return s.fail(c, err)
	}
	return sendSync(c, wirePool{Name: p.Name, Driver: p.Driver, Status: p.Status})
}

// customType checks the :type of a volume route: only "custom".
func customType(c *fiber.Ctx) bool {
	if t := c.Params("type"); t != "" && t != "custom" {
		_ = sendError(c, http.StatusBadRequest, "Only custom storage volume requests are allowed")
		return false
	}
	return true
}

func toWire(v *storage.Volume) wireVolume {
	cfg := maps.Clone(v.Config)
	return wireVolume{Name: v.Name, Description: v.Description, Pool: v.Pool, Type: v.Type, ContentType: v.ContentType, Config: cfg, Location: v.Location}
}

func (s *Server) listVolumes(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	if c.Query("recursion") == "" || c.Query("recursion") == "0" {
		return sendError(c, http.StatusNotImplemented, "Only recursive requests are currently supported")
	}
	if !customType(c) {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	vols, err := st.Volumes(ctx, c.Params("pool"))
	if err != nil {
		return s.fail(c, err)
	}
	out := []wireVolume{}
	for _, v := range vols {
		if v.Config[storage.KeyOwner] == ownerOf(c) {
			out = append(out, toWire(v))
		}
	}
	return sendSync(c, out)
}

func (s *Server) createVolume(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	var req volumesPost
	if !decodeJSON(c, &req) {
		return nil
	}
	switch {
	case req.Type != "custom":
		return sendError(c, http.StatusBadRequest, "Only custom storage volumes can be created")
	case c.Params("type") != "" && c.Params("type") != req.Type:
		return sendError(c, http.StatusBadRequest, "URL volume type does not match the volume type in body")
	case req.Source.Type != "" || req.Source.Name != "":
		return sendError(c, http.StatusBadRequest, "Volume sources (copies) are not supported by this host")
	}
	if _, set := req.Config[storage.KeyOwner]; set {
		return sendError(c, http.StatusBadRequest, "Volume owner cannot be changed")
	}
	cfg := maps.Clone(req.Config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	cfg[storage.KeyOwner] = ownerOf(c)
	ctx, cancel := reqCtx()
	defer cancel()
	_, err := st.CreateVolume(ctx, c.Params("pool"), req.Name, req.ContentType, req.Description, cfg)
	switch {
	case errors.Is(err, errdefs.ErrAlreadyExists):
		// LXD refuses before it starts an operation.
		return sendError(c, http.StatusConflict, msgVolumeExists)
	case err != nil && (errdefs.HTTPStatus(err) >= 500 || errors.Is(err, errdefs.ErrNotFound)):
		return s.fail(c, err)
	}
	return sendSync(c, s.ops.finish(callerOf(c).UUID, err))
}

// ownedVolume returns the volume of the route when the caller's identity
// owns it; otherwise it answered (404 for one it does not own).
func (s *Server) ownedVolume(c *fiber.Ctx, st Storage) (*storage.Volume, bool) {
	if !customType(c) {
		return nil, false
	}
	ctx, cancel := reqCtx()
	defer cancel()
	v, err := st.Volume(ctx, c.Params("pool"), c.Params("volume"))
	if err != nil {
		_ = s.fail(c, err)
		return nil, false
	}
	if v.Config[storage.KeyOwner] != ownerOf(c) {
		_ = sendError(c, http.StatusNotFound, "")
		return nil, false
	}
	return v, true
}

func (s *Server) getVolume(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	return sendSync(c, toWire(v))
}

func (s *Server) putVolume(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	var req volumePut
	if !decodeJSON(c, &req) {
		return nil
	}
	if o, set := req.Config[storage.KeyOwner]; set && o != v.Config[storage.KeyOwner] {
		return sendError(c, http.StatusBadRequest, "Volume owner cannot be changed")
	}
	ctx, cancel := reqCtx()
	defer cancel()
	_, err := st.UpdateVolume(ctx, v.Pool, v.Name, req.Description, req.Config)
	if err != nil && errdefs.HTTPStatus(err) >= 500 {
		return s.fail(c, err)
	}
	return sendSync(c, s.ops.finish(callerOf(c).UUID, err))
}

func (s *Server) deleteVolume(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	err := st.DeleteVolume(ctx, v.Pool, v.Name)
	if err != nil && errdefs.HTTPStatus(err) >= 500 {
		return s.fail(c, err)
	}
	return sendSync(c, s.ops.finish(callerOf(c).UUID, err))
}

func snapWire(v *storage.Volume, volume string) wireSnapshot {
	return wireSnapshot{Name: v.Name[len(volume)+1:], Description: v.Description, ContentType: v.ContentType, Config: maps.Clone(v.Config)}
}

func (s *Server) listSnapshots(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	if c.Query("recursion") == "" || c.Query("recursion") == "0" {
		return sendError(c, http.StatusNotImplemented, "Only recursive requests are currently supported")
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	snaps, err := st.Snapshots(ctx, v.Pool, v.Name)
	if err != nil {
		return s.fail(c, err)
	}
	out := []wireSnapshot{}
	for _, sn := range snaps {
		out = append(out, snapWire(sn, v.Name))
	}
	return sendSync(c, out)
}

func (s *Server) createSnapshot(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	var req snapshotsPost
	if !decodeJSON(c, &req) {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	_, err := st.CreateSnapshot(ctx, v.Pool, v.Name, req.Name, req.Description)
	if err != nil && errdefs.HTTPStatus(err) >= 500 {
		return s.fail(c, err)
	}
	return sendSync(c, s.ops.finish(callerOf(c).UUID, err))
}

func (s *Server) getSnapshot(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	sn, err := st.Volume(ctx, v.Pool, v.Name+"/"+c.Params("snapshot"))
	if err != nil {
		return s.fail(c, err)
	}
	return sendSync(c, snapWire(sn, v.Name))
}

func (s *Server) deleteSnapshot(c *fiber.Ctx) error {
	st, ok := s.storageOr501(c)
	if !ok {
		return nil
	}
	v, ok := s.ownedVolume(c, st)
	if !ok {
		return nil
	}
	ctx, cancel := reqCtx()
	defer cancel()
	err := st.DeleteVolume(ctx, v.Pool, v.Name+"/"+c.Params("snapshot"))
	if errors.Is(err, errdefs.ErrNotFound) {
		return sendError(c, http.StatusNotFound, "")
	}
	if err != nil && errdefs.HTTPStatus(err) >= 500 {
		return s.fail(c, err)
	}
	return sendSync(c, s.ops.finish(callerOf(c).UUID, err))
}

// patchInstance answers PATCH /1.0/instances/{name}: the caller's identity
// adds, changes (value: the whole device) and removes (value: null) the
// devices it owns; a device someone else owns is refused (403), a disk
// must use a volume the identity owns. Devices added are owned by the
// identity (volatile.<dev>.devlxd.owner). On a running instance the
// backend hot-plugs them (or the change is refused precisely).
func (s *Server) patchInstance(c *fiber.Ctx) error {
	if s.cfg.Devices == nil {
		return sendError(c, http.StatusNotImplemented, "Device changes are not configured on this host")
	}
	inst, ok := s.target(c)
	if !ok {
		return nil
	}
	var req instancePut
	if !decodeJSON(c, &req) {
		return nil
	}
	owner := ownerOf(c)
	u := instance.DeviceUpdate{Put: map[string]map[string]string{}, Config: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(req.Devices)) {
		dev := req.Devices[name]
		_, exists := inst.Devices[name]
		owned := inst.Config[ownerKey(name)] == owner
		switch {
		case dev == nil && !exists:
			continue // removing what is not there: nothing to do
		case dev == nil && !owned:
			return sendError(c, http.StatusForbidden, "Not authorized to delete device \""+name+"\"")
		case dev == nil:
			u.Remove = append(u.Remove, name)
			continue
		case exists && !owned:
			return sendError(c, http.StatusForbidden, "Not authorized to manage device \""+name+"\"")
		}
		if dev["type"] != "disk" || dev["pool"] == "" || dev["source"] == "" {
			return sendError(c, http.StatusBadRequest, "Invalid device configuration: devices managed through devlxd are disks of a storage volume (type=disk pool=POOL source=VOLUME)")
		}
		if s.cfg.Storage == nil {
			return sendError(c, http.StatusNotImplemented, "Storage is not configured on this host")
		}
		ctx, cancel := reqCtx()
		v, err := s.cfg.Storage.Volume(ctx, dev["pool"], dev["source"])
		cancel()
		if err != nil || v.Config[storage.KeyOwner] != owner {
			return sendError(c, http.StatusForbidden, "Not authorized to use storage volume \""+dev["source"]+"\"")
		}
		if !exists || !maps.Equal(inst.Devices[name], dev) {
			u.Put[name] = maps.Clone(dev)
			u.Config[ownerKey(name)] = owner
		}
	}
	if len(u.Put) == 0 && len(u.Remove) == 0 {
		return sendSync(c, nil)
	}
	by := events.Requestor{Protocol: "devlxd", Username: owner, Address: string(c.Locals(localsIdentity).(linkhost.Identity).Link)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*requestTimeout)
	defer cancel()
	if _, err := s.cfg.Devices.UpdateDevices(ctx, inst.Name, u, by); err != nil {
		return s.fail(c, err)
	}
	return sendSync(c, nil)
}
