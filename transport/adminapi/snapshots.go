package adminapi

import (
	"context"
	"fmt"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
)

// Snapshotter is implemented by instance services with snapshots, restore
// and move (core/instance.Manager); without it those routes answer 501.
type Snapshotter interface {
	CreateSnapshot(ctx context.Context, name, snap string, stateful bool, by events.Requestor) (*instance.Snapshot, error)
	Snapshots(ctx context.Context, name string) ([]*instance.Snapshot, error)
	GetSnapshot(ctx context.Context, name, snap string) (*instance.Snapshot, error)
	DeleteSnapshot(ctx context.Context, name, snap string, by events.Requestor) error
	RenameSnapshot(ctx context.Context, name, oldName, newName string, by events.Requestor) error
	Restore(ctx context.Context, name, snap string, opts instance.RestoreOptions, by events.Requestor) error
	Move(ctx context.Context, name, backend string, by events.Requestor) error
}

var _ Snapshotter = (*instance.Manager)(nil)

// registerSnapshots adds the snapshot, restore and move routes (issue 16).
func (a *API) registerSnapshots(v1 fiber.Router) {
	v1.Put("/instances/:name", a.putInstance)
	v1.Post("/instances/:name", a.postInstance)
	v1.Get("/instances/:name/snapshots", a.listSnapshots)
	v1.Post("/instances/:name/snapshots", a.createSnapshot)
	v1.Get("/instances/:name/snapshots/:snap", a.getSnapshot)
	v1.Post("/instances/:name/snapshots/:snap", a.renameSnapshot)
	v1.Delete("/instances/:name/snapshots/:snap", a.deleteSnapshot)
}

// snapshotter returns the service's Snapshotter and the :name parameter.
func (a *API) snapshotter(c *fiber.Ctx) (Snapshotter, string, error) {
	name, err := nameParam(c)
	if err != nil {
		return nil, "", err
	}
	s, ok := a.cfg.Instances.(Snapshotter)
	if !ok {
		return nil, "", fmt.Errorf("this daemon keeps no snapshots: %w", errdefs.ErrNotSupported)
	}
	return s, name, nil
}

// snapParam returns the :snap path parameter, unescaped and validated.
func snapParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("snap")
	snap, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("invalid snapshot name %q: bad escape", raw)
	}
	return snap, instance.ValidateSnapshotName(snap)
}

// listSnapshots answers GET /1.0/instances/{name}/snapshots with the
// snapshot objects, oldest first.
func (a *API) listSnapshots(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	list, err := s.Snapshots(c.UserContext(), name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireSnapshots(list))
}

// createSnapshot answers POST /1.0/instances/{name}/snapshots with 201 and
// the snapshot.
func (a *API) createSnapshot(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	var req api.InstanceSnapshotsPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return badRequest("name is required: the snapshot's name")
	}
	snap, err := s.CreateSnapshot(c.UserContext(), name, req.Name, req.Stateful, requestor(c))
	if err != nil {
		return err
	}
	return syncCreated(c, instance.WireSnapshot(snap))
}

// getSnapshot answers GET /1.0/instances/{name}/snapshots/{snap}.
func (a *API) getSnapshot(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	snap, err := snapParam(c)
	if err != nil {
		return err
	}
	sn, err := s.GetSnapshot(c.UserContext(), name, snap)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireSnapshot(sn))
}

// renameSnapshot answers POST /1.0/instances/{name}/snapshots/{snap}
// {"name": "new"} (LXD's rename) with the renamed snapshot.
func (a *API) renameSnapshot(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	snap, err := snapParam(c)
	if err != nil {
		return err
	}
	var req api.InstanceSnapshotPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return badRequest("name is required: the snapshot's new name")
	}
	if req.Name == snap {
		return badRequest("the snapshot is called %q already", snap)
	}
	ctx := c.UserContext()
	if err := s.RenameSnapshot(ctx, name, snap, req.Name, requestor(c)); err != nil {
		return err
	}
	sn, err := s.GetSnapshot(ctx, name, req.Name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireSnapshot(sn))
}

// deleteSnapshot answers DELETE /1.0/instances/{name}/snapshots/{snap}.
func (a *API) deleteSnapshot(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	snap, err := snapParam(c)
	if err != nil {
		return err
	}
	if err := s.DeleteSnapshot(c.UserContext(), name, snap, requestor(c)); err != nil {
		return err
	}
	return sync200(c, nil)
}

// putInstance answers PUT /1.0/instances/{name} {"restore": "snap"[,
// "stateful": true]}, LXD's restore, with the instance's state afterwards.
// PUT replaces nothing else here: config changes go through PATCH.
func (a *API) putInstance(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	var req api.InstancePut
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Restore == "" {
		return badRequest(`restore is required: PUT on an instance restores a snapshot ({"restore": "NAME"}); change config with PATCH`)
	}
	if err := instance.ValidateSnapshotName(req.Restore); err != nil {
		return err
	}
	ctx := c.UserContext()
	if err := s.Restore(ctx, name, req.Restore, instance.RestoreOptions{Stateful: req.Stateful}, requestor(c)); err != nil {
		return err
	}
	inst, err := a.cfg.Instances.Get(ctx, name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireState(inst))
}

// postInstance answers POST /1.0/instances/{name} {"backend": "qemu"}: it
// moves the stopped instance to that backend and answers the instance.
func (a *API) postInstance(c *fiber.Ctx) error {
	s, name, err := a.snapshotter(c)
	if err != nil {
		return err
	}
	var req api.InstancePost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name != "" && req.Name != name {
		return fmt.Errorf("renaming instance %q to %q: renaming is not supported: %w", name, req.Name, errdefs.ErrNotSupported)
	}
	if req.Backend == "" {
		return badRequest("backend is required: the backend to move the instance to")
	}
	if err := a.checkBackend(req.Backend); err != nil {
		return err
	}
	ctx := c.UserContext()
	if err := s.Move(ctx, name, req.Backend, requestor(c)); err != nil {
		return err
	}
	inst, err := a.cfg.Instances.Get(ctx, name)
	if err != nil {
		return err
	}
	return sync200(c, instance.WireInstance(inst, nil))
}
