package adminapi

import (
	"context"
	"net/http"
	"path/filepath"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/internal/hangup"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// ImageService is the image store behind /1.0/images (core/images.Store).
// Errors wrap errdefs kinds.
type ImageService interface {
	Import(ctx context.Context, path string, opts images.ImportOptions) (*images.Image, error)
	Resolve(ctx context.Context, ref string) (*images.Image, error)
	List(ctx context.Context) ([]*images.Image, error)
	Delete(ctx context.Context, fp string) error
	AddAlias(ctx context.Context, name, fp, description string) error
	DeleteAlias(ctx context.Context, name string) error
	Aliases(ctx context.Context) ([]*images.Alias, error)
	SetPublic(ctx context.Context, ref string, public bool) (*images.Image, error)
	Imports() []images.ImportProgress
}

var _ ImageService = (*images.Store)(nil)

// registerImages adds the image store's routes to the /1.0 group. The
// routes that take a body check it before they need the store.
func (a *API) registerImages(v1 fiber.Router) {
	fp, alias := imageRefParam, aliasParam
	v1.Get("/images", a.ok(httpwrap.With(a.imageService, a.listImages)))
	v1.Post("/images", a.created(decoded(a.importImage)))
	v1.Get("/images/imports", a.ok(httpwrap.With(a.imageService, a.listImageImports)))
	a.registerImageBuilds(v1) // imagebuilds.go
	v1.Get("/images/aliases", a.ok(httpwrap.With(a.imageService, a.listImageAliases)))
	v1.Post("/images/aliases", a.created(decoded(a.createImageAlias)))
	v1.Get("/images/aliases/:alias", a.ok(httpwrap.With(a.imageService, a.getImageAlias), alias))
	v1.Delete("/images/aliases/:alias", a.ok(httpwrap.With(a.imageService, a.deleteImageAlias), alias))
	v1.Get("/images/:fp", a.ok(httpwrap.With(a.imageService, a.getImage), fp))
	v1.Patch("/images/:fp", a.ok(decoded(a.patchImage), fp))
	v1.Delete("/images/:fp", a.ok(httpwrap.With(a.imageService, a.deleteImage), fp))
}

// imageService returns the store, or a 501 error when the daemon has none.
func (a *API) imageService() (ImageService, error) {
	if a.cfg.Images == nil {
		return nil, fiber.NewError(http.StatusNotImplemented, "this daemon has no image store")
	}
	return a.cfg.Images, nil
}

// imageOut is the wire form of an image.
func imageOut(im *images.Image, descriptions map[string]string) api.Image {
	out := api.Image{
		Fingerprint: im.Fingerprint, Filename: im.Filename, Size: im.Size, Format: im.Format, Type: "virtual-machine",
		Aliases: []api.ImageAlias{}, Properties: im.Properties, Kernel: im.Kernel, Initrd: im.Initrd,
		Public: im.Public, CreatedAt: im.CreatedAt, UploadedAt: im.CreatedAt,
	}
	if out.Properties == nil {
		out.Properties = map[string]string{}
	}
	for _, a := range im.Aliases {
		out.Aliases = append(out.Aliases, api.ImageAlias{Name: a, Description: descriptions[a]})
	}
	return out
}

// aliasOut is the wire form of an alias.
func aliasOut(al *images.Alias) api.ImageAlias {
	return api.ImageAlias{Name: al.Name, Description: al.Description, Target: al.Target}
}

// descriptions returns every alias's description by name.
func descriptions(ctx context.Context, s ImageService) (map[string]string, error) {
	as, err := s.Aliases(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(as))
	for _, a := range as {
		out[a.Name] = a.Description
	}
	return out, nil
}

// imageOf answers an image with its aliases' descriptions, or the error
// of getting it.
func imageOf(ctx context.Context, s ImageService, im *images.Image, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	desc, err := descriptions(ctx, s)
	if err != nil {
		return nil, err
	}
	return imageOut(im, desc), nil
}

// listImages answers GET /1.0/images: every image object, oldest first.
func (a *API) listImages(r *request, s ImageService) (any, error) {
	list, err := s.List(r.UserContext())
	if err != nil {
		return nil, err
	}
	desc, err := descriptions(r.UserContext(), s)
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, len(list))
	for i, im := range list {
		out[i] = imageOut(im, desc)
	}
	return out, nil
}

// importImage answers POST /1.0/images: the file at path (on the daemon's
// machine) is copied into the store; 201 with the image object. The copy
// runs under a context that ends when the client closes the connection
// (fasthttp's own does not), so a client that goes away stops it; 507
// when the image does not fit in the store's free space.
func (a *API) importImage(r *request, req *api.ImagesPost) (any, error) {
	for what, p := range map[string]string{"path": req.Path, "kernel": req.Kernel, "initrd": req.Initrd} {
		if (p != "" || what == "path") && !filepath.IsAbs(p) {
			return nil, badRequest("invalid %s %q: an absolute path of a file on the daemon's machine is required", what, p)
		}
	}
	if req.Alias != "" {
		if err := images.ValidateAlias(req.Alias); err != nil {
			return nil, err
		}
	}
	s, err := a.imageService()
	if err != nil {
		return nil, err
	}
	ctx, stop := hangup.Context(r.UserContext(), r.Context().Conn())
	defer stop()
	im, err := s.Import(ctx, req.Path, images.ImportOptions{
		Alias: req.Alias, Filename: req.Filename, Properties: req.Properties, Kernel: req.Kernel, Initrd: req.Initrd,
		Public: req.Public,
	})
	if err != nil {
		return nil, err
	}
	return imageOut(im, nil), nil
}

// listImageImports answers GET /1.0/images/imports: the imports in
// progress, oldest first (an empty list when none runs).
func (a *API) listImageImports(_ *request, s ImageService) (any, error) {
	list := s.Imports()
	out := make([]api.ImageImport, len(list))
	for i, p := range list {
		out[i] = api.ImageImport{Name: p.Name(), Path: p.Path, Alias: p.Alias, Done: p.Done, Total: p.Total, StartedAt: p.Started}
	}
	return out, nil
}

// getImage answers GET /1.0/images/{fp} (a fingerprint or unique prefix).
func (a *API) getImage(r *request, s ImageService) (any, error) {
	im, err := s.Resolve(r.UserContext(), r.Param("fp"))
	return imageOf(r.UserContext(), s, im, err)
}

// patchImage answers PATCH /1.0/images/{fp} {"public":true|false}: whether
// guests may download the image through devlxd; the image object.
func (a *API) patchImage(r *request, req *api.ImagePatch) (any, error) {
	if req.Public == nil {
		return nil, badRequest(`invalid image update: nothing to change (only "public" can change)`)
	}
	s, err := a.imageService()
	if err != nil {
		return nil, err
	}
	im, err := s.SetPublic(r.UserContext(), r.Param("fp"), *req.Public)
	return imageOf(r.UserContext(), s, im, err)
}

// deleteImage answers DELETE /1.0/images/{fp}: 409 while an instance uses it.
func (a *API) deleteImage(r *request, s ImageService) (any, error) {
	im, err := s.Resolve(r.UserContext(), r.Param("fp"))
	if err != nil {
		return nil, err
	}
	if err := s.Delete(r.UserContext(), im.Fingerprint); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// listImageAliases answers GET /1.0/images/aliases.
func (a *API) listImageAliases(r *request, s ImageService) (any, error) {
	as, err := s.Aliases(r.UserContext())
	if err != nil {
		return nil, err
	}
	out := make([]api.ImageAlias, len(as))
	for i, al := range as {
		out[i] = aliasOut(al)
	}
	return out, nil
}

// createImageAlias answers POST /1.0/images/aliases.
func (a *API) createImageAlias(r *request, req *api.ImageAliasesPost) (any, error) {
	if err := images.ValidateAlias(req.Name); err != nil {
		return nil, err
	}
	if req.Target == "" {
		return nil, badRequest("invalid alias: a target image is required")
	}
	s, err := a.imageService()
	if err != nil {
		return nil, err
	}
	im, err := s.Resolve(r.UserContext(), req.Target)
	if err != nil {
		return nil, err
	}
	if err := s.AddAlias(r.UserContext(), req.Name, im.Fingerprint, req.Description); err != nil {
		return nil, err
	}
	return api.ImageAlias{Name: req.Name, Description: req.Description, Target: im.Fingerprint}, nil
}

// getImageAlias answers GET /1.0/images/aliases/{alias}.
func (a *API) getImageAlias(r *request, s ImageService) (any, error) {
	name := r.Param("alias")
	as, err := s.Aliases(r.UserContext())
	if err != nil {
		return nil, err
	}
	for _, al := range as {
		if al.Name == name {
			return aliasOut(al), nil
		}
	}
	return nil, fiber.NewError(http.StatusNotFound, "image alias "+name+" not found")
}

// deleteImageAlias answers DELETE /1.0/images/aliases/{alias}.
func (a *API) deleteImageAlias(r *request, s ImageService) (any, error) {
	if err := s.DeleteAlias(r.UserContext(), r.Param("alias")); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}
