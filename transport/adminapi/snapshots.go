package adminapi

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// Snapshotter is implemented by instance services with snapshots, restore
// and move (core/instance.Manager); without it those routes answer 501.
type Snapshotter interface {
	CreateSnapshot(ctx context.Context, name, snap string, opts instance.SnapshotOptions, by events.Requestor) (*instance.Snapshot, error)
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
	name, snap := instanceNameParam, snapshotNameParam
	v1.Put("/instances/:name", a.ok(httpwrap.With(a.snapshotter, withBody(a.putInstance)), name))
	v1.Post("/instances/:name", a.ok(httpwrap.With(a.snapshotter, withBody(a.postInstance)), name))
	v1.Get("/instances/:name/snapshots", a.ok(httpwrap.With(a.snapshotter, a.listSnapshots), name))
	v1.Post("/instances/:name/snapshots", a.created(httpwrap.With(a.snapshotter, withBody(a.createSnapshot)), name))
	v1.Get("/instances/:name/snapshots/:snap", a.ok(httpwrap.With(a.snapshotter, a.getSnapshot), name, snap))
	v1.Post("/instances/:name/snapshots/:snap", a.ok(httpwrap.With(a.snapshotter, withBody(a.renameSnapshot)), name, snap))
	v1.Delete("/instances/:name/snapshots/:snap", a.ok(httpwrap.With(a.snapshotter, a.deleteSnapshot), name, snap))
}

// snapshotter returns the service's Snapshotter, or a 501 error.
func (a *API) snapshotter() (Snapshotter, error) {
	return optional[Snapshotter](a.cfg.Instances, "this daemon keeps no snapshots")
}

// wireSnapshotOf answers a snapshot, or the error of getting it.
var wireSnapshotOf = wired(instance.WireSnapshot)

// listSnapshots answers GET /1.0/instances/{name}/snapshots with the
// snapshot objects, oldest first.
func (a *API) listSnapshots(r *request, s Snapshotter) (any, error) {
	return wired(instance.WireSnapshots)(s.Snapshots(r.UserContext(), r.Param("name")))
}

// createSnapshot answers POST /1.0/instances/{name}/snapshots with 201 and
// the snapshot.
func (a *API) createSnapshot(r *request, s Snapshotter, req *api.InstanceSnapshotsPost) (any, error) {
	if req.Name == "" {
		return nil, badRequest("name is required: the snapshot's name")
	}
	opts := instance.SnapshotOptions{Stateful: req.Stateful, NoFreeze: req.NoFreeze}
	return wireSnapshotOf(s.CreateSnapshot(r.UserContext(), r.Param("name"), req.Name, opts, requestor(r.Ctx)))
}

// getSnapshot answers GET /1.0/instances/{name}/snapshots/{snap}.
func (a *API) getSnapshot(r *request, s Snapshotter) (any, error) {
	return wireSnapshotOf(s.GetSnapshot(r.UserContext(), r.Param("name"), r.Param("snap")))
}

// renameSnapshot answers POST /1.0/instances/{name}/snapshots/{snap}
// {"name": "new"} (LXD's rename) with the renamed snapshot.
func (a *API) renameSnapshot(r *request, s Snapshotter, req *api.InstanceSnapshotPost) (any, error) {
	name, snap := r.Param("name"), r.Param("snap")
	if req.Name == "" {
		return nil, badRequest("name is required: the snapshot's new name")
	}
	if req.Name == snap {
		return nil, badRequest("the snapshot is called %q already", snap)
	}
	ctx := r.UserContext()
	if err := s.RenameSnapshot(ctx, name, snap, req.Name, requestor(r.Ctx)); err != nil {
		return nil, err
	}
	return wireSnapshotOf(s.GetSnapshot(ctx, name, req.Name))
}

// deleteSnapshot answers DELETE /1.0/instances/{name}/snapshots/{snap}.
func (a *API) deleteSnapshot(r *request, s Snapshotter) (any, error) {
	return nil, s.DeleteSnapshot(r.UserContext(), r.Param("name"), r.Param("snap"), requestor(r.Ctx))
}

// putInstance answers PUT /1.0/instances/{name} {"restore": "snap"[,
// "stateful": true]}, LXD's restore, with the instance's state afterwards.
// PUT replaces nothing else here: config changes go through PATCH.
func (a *API) putInstance(r *request, s Snapshotter, req *api.InstancePut) (any, error) {
	name := r.Param("name")
	if req.Restore == "" {
		return nil, badRequest(`restore is required: PUT on an instance restores a snapshot ({"restore": "NAME"}); change config with PATCH`)
	}
	if err := instance.ValidateSnapshotName(req.Restore); err != nil {
		return nil, err
	}
	ctx := r.UserContext()
	if err := s.Restore(ctx, name, req.Restore, instance.RestoreOptions{Stateful: req.Stateful}, requestor(r.Ctx)); err != nil {
		return nil, err
	}
	return a.stateOf(ctx, name)
}

// postInstance answers POST /1.0/instances/{name} {"backend": "qemu"}: it
// moves the stopped instance to that backend and answers the instance.
func (a *API) postInstance(r *request, s Snapshotter, req *api.InstancePost) (any, error) {
	name := r.Param("name")
	if req.Name != "" && req.Name != name {
		return nil, fmt.Errorf("renaming instance %q to %q: renaming is not supported: %w", name, req.Name, errdefs.ErrNotSupported)
	}
	if req.Backend == "" {
		return nil, badRequest("backend is required: the backend to move the instance to")
	}
	if err := a.checkBackend(req.Backend); err != nil {
		return nil, err
	}
	ctx := r.UserContext()
	if err := s.Move(ctx, name, req.Backend, requestor(r.Ctx)); err != nil {
		return nil, err
	}
	return wireInstanceOf(a.cfg.Instances.Get(ctx, name))
}
