package adminapi

import (
	"encoding/hex"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// BuildService keeps the image builds clients run and report
// (core/images.Store); the image service has them when it implements it.
// Errors wrap errdefs kinds.
type BuildService interface {
	StartBuild(name string) (images.BuildProgress, error)
	ReportBuild(id string, r images.BuildReport) (images.BuildProgress, error)
	Builds() []images.BuildProgress
}

var _ BuildService = (*images.Store)(nil)

// buildIDParam is the :id of a build route: 32 hex digits.
var buildIDParam = requiredParam("id", "build id", func(v string) error {
	if b, err := hex.DecodeString(v); err != nil || len(b) != 16 {
		return badRequest("invalid build id %q: 32 hex digits are expected", v)
	}
	return nil
})

// registerImageBuilds adds the image builds' routes (before
// /images/:fp, which would take "builds" for a fingerprint).
func (a *API) registerImageBuilds(v1 fiber.Router) {
	v1.Get("/images/builds", a.ok(httpwrap.With(a.buildService, a.listImageBuilds)))
	v1.Post("/images/builds", a.created(decoded(a.startImageBuild)))
	v1.Get("/images/builds/:id", a.ok(httpwrap.With(a.buildService, a.getImageBuild), buildIDParam))
	v1.Patch("/images/builds/:id", a.ok(decoded(a.reportImageBuild), buildIDParam))
}

// buildService returns the build registry, or a 501 error when the
// daemon's image store has none.
func (a *API) buildService() (BuildService, error) {
	if bs, ok := a.cfg.Images.(BuildService); ok {
		return bs, nil
	}
	return nil, fiber.NewError(http.StatusNotImplemented, "this daemon has no image store")
}

// buildOut is the wire form of a build.
func buildOut(b images.BuildProgress) api.ImageBuild {
	out := api.ImageBuild{
		ID: b.ID, Name: b.Name, Status: b.Status, Stage: b.Stage, Step: b.Step, Done: b.Done, Total: b.Total,
		Rate: b.Rate(), Lines: b.Lines, Error: b.Error, StartedAt: b.Started, StageStartedAt: b.StageStarted, UpdatedAt: b.Updated,
	}
	if !b.Ended.IsZero() {
		out.EndedAt = &b.Ended
	}
	return out
}

// listImageBuilds answers GET /1.0/images/builds: the builds running and
// those failed lately, oldest first.
func (a *API) listImageBuilds(_ *request, bs BuildService) (any, error) {
	list := bs.Builds()
	out := make([]api.ImageBuild, len(list))
	for i, b := range list {
		out[i] = buildOut(b)
	}
	return out, nil
}

// getImageBuild answers GET /1.0/images/builds/{id}.
func (a *API) getImageBuild(r *request, bs BuildService) (any, error) {
	id := r.Param("id")
	for _, b := range bs.Builds() {
		if b.ID == id {
			return buildOut(b), nil
		}
	}
	return nil, fiber.NewError(http.StatusNotFound, "image build "+id+" not found")
}

// startImageBuild answers POST /1.0/images/builds {"name"}: 201 with the
// new build and its id, which the client's reports name.
func (a *API) startImageBuild(_ *request, req *api.ImageBuildsPost) (any, error) {
	if req.Name == "" {
		return nil, badRequest(`invalid image build: "name", the image's alias, is required`)
	}
	if err := images.ValidateAlias(req.Name); err != nil {
		return nil, err
	}
	bs, err := a.buildService()
	if err != nil {
		return nil, err
	}
	b, err := bs.StartBuild(req.Name)
	if err != nil {
		return nil, err
	}
	return buildOut(b), nil
}

// reportImageBuild answers PATCH /1.0/images/builds/{id}: the client's
// report of its stage, progress or end; the build as it now stands.
func (a *API) reportImageBuild(r *request, req *api.ImageBuildPatch) (any, error) {
	bs, err := a.buildService()
	if err != nil {
		return nil, err
	}
	b, err := bs.ReportBuild(r.Param("id"), images.BuildReport{
		Stage: req.Stage, Done: req.Done, Total: req.Total, Lines: req.Lines, Status: req.Status, Error: req.Error,
	})
	if err != nil {
		return nil, err
	}
	return buildOut(b), nil
}
