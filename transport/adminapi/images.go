package adminapi

import (
	"context"
	"net/http"
	"path/filepath"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/internal/hangup"
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
	Aliases(ctx context.Context) ([]*db.ImageAlias, []string, error)
	SetPublic(ctx context.Context, ref string, public bool) (*images.Image, error)
}

var _ ImageService = (*images.Store)(nil)

// registerImages adds the image store's routes to the /1.0 group.
func (a *API) registerImages(v1 fiber.Router) {
	v1.Get("/images", a.listImages)
	v1.Post("/images", a.importImage)
	v1.Get("/images/aliases", a.listImageAliases)
	v1.Post("/images/aliases", a.createImageAlias)
	v1.Get("/images/aliases/:alias", a.getImageAlias)
	v1.Delete("/images/aliases/:alias", a.deleteImageAlias)
	v1.Get("/images/:fp", a.getImage)
	v1.Patch("/images/:fp", a.patchImage)
	v1.Delete("/images/:fp", a.deleteImage)
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

// descriptions returns every alias's description by name.
func descriptions(ctx context.Context, s ImageService) (map[string]string, error) {
	as, _, err := s.Aliases(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(as))
	for _, a := range as {
		out[a.Name] = a.Description
	}
	return out, nil
}

// listImages answers GET /1.0/images: every image object, oldest first.
func (a *API) listImages(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	list, err := s.List(c.UserContext())
	if err != nil {
		return err
	}
	desc, err := descriptions(c.UserContext(), s)
	if err != nil {
		return err
	}
	out := make([]api.Image, len(list))
	for i, im := range list {
		out[i] = imageOut(im, desc)
	}
	return sync200(c, out)
}

// importImage answers POST /1.0/images: the file at path (on the daemon's
// machine) is copied into the store; 201 with the image object. The copy
// runs under a context that ends when the client closes the connection
// (fasthttp's own does not), so a client that goes away stops it; 507
// when the image does not fit in the store's free space.
func (a *API) importImage(c *fiber.Ctx) error {
	var req api.ImagesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	for what, p := range map[string]string{"path": req.Path, "kernel": req.Kernel, "initrd": req.Initrd} {
		if (p != "" || what == "path") && !filepath.IsAbs(p) {
			return badRequest("invalid %s %q: an absolute path of a file on the daemon's machine is required", what, p)
		}
	}
	if req.Alias != "" {
		if err := images.ValidateAlias(req.Alias); err != nil {
			return err
		}
	}
	s, err := a.imageService()
	if err != nil {
		return err
	}
	ctx, stop := hangup.Context(c.UserContext(), c.Context().Conn())
	defer stop()
	im, err := s.Import(ctx, req.Path, images.ImportOptions{
		Alias: req.Alias, Filename: req.Filename, Properties: req.Properties, Kernel: req.Kernel, Initrd: req.Initrd,
		Public: req.Public,
	})
	if err != nil {
		return err
	}
	return syncCreated(c, imageOut(im, nil))
}

// getImage answers GET /1.0/images/{fp} (a fingerprint or unique prefix).
func (a *API) getImage(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	ref, err := pathParam(c, "fp", "fingerprint")
	if err != nil {
		return err
	}
	im, err := s.Resolve(c.UserContext(), ref)
	if err != nil {
		return err
	}
	desc, err := descriptions(c.UserContext(), s)
	if err != nil {
		return err
	}
	return sync200(c, imageOut(im, desc))
}

// patchImage answers PATCH /1.0/images/{fp} {"public":true|false}: whether
// guests may download the image through devlxd; the image object.
func (a *API) patchImage(c *fiber.Ctx) error {
	var req api.ImagePatch
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Public == nil {
		return badRequest(`invalid image update: nothing to change (only "public" can change)`)
	}
	s, err := a.imageService()
	if err != nil {
		return err
	}
	ref, err := pathParam(c, "fp", "fingerprint")
	if err != nil {
		return err
	}
	im, err := s.SetPublic(c.UserContext(), ref, *req.Public)
	if err != nil {
		return err
	}
	desc, err := descriptions(c.UserContext(), s)
	if err != nil {
		return err
	}
	return sync200(c, imageOut(im, desc))
}

// deleteImage answers DELETE /1.0/images/{fp}: 409 while an instance uses it.
func (a *API) deleteImage(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	ref, err := pathParam(c, "fp", "fingerprint")
	if err != nil {
		return err
	}
	im, err := s.Resolve(c.UserContext(), ref)
	if err != nil {
		return err
	}
	if err := s.Delete(c.UserContext(), im.Fingerprint); err != nil {
		return err
	}
	return sync200(c, map[string]any{})
}

// listImageAliases answers GET /1.0/images/aliases.
func (a *API) listImageAliases(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	as, fps, err := s.Aliases(c.UserContext())
	if err != nil {
		return err
	}
	out := make([]api.ImageAlias, len(as))
	for i, al := range as {
		out[i] = api.ImageAlias{Name: al.Name, Description: al.Description, Target: fps[i]}
	}
	return sync200(c, out)
}

// createImageAlias answers POST /1.0/images/aliases.
func (a *API) createImageAlias(c *fiber.Ctx) error {
	var req api.ImageAliasesPost
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := images.ValidateAlias(req.Name); err != nil {
		return err
	}
	if req.Target == "" {
		return badRequest("invalid alias: a target image is required")
	}
	s, err := a.imageService()
	if err != nil {
		return err
	}
	im, err := s.Resolve(c.UserContext(), req.Target)
	if err != nil {
		return err
	}
	if err := s.AddAlias(c.UserContext(), req.Name, im.Fingerprint, req.Description); err != nil {
		return err
	}
	return syncCreated(c, api.ImageAlias{Name: req.Name, Description: req.Description, Target: im.Fingerprint})
}

// getImageAlias answers GET /1.0/images/aliases/{alias}.
func (a *API) getImageAlias(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	name, err := pathParam(c, "alias", "alias")
	if err != nil {
		return err
	}
	as, fps, err := s.Aliases(c.UserContext())
	if err != nil {
		return err
	}
	for i, al := range as {
		if al.Name == name {
			return sync200(c, api.ImageAlias{Name: al.Name, Description: al.Description, Target: fps[i]})
		}
	}
	return fiber.NewError(http.StatusNotFound, "image alias "+name+" not found")
}

// deleteImageAlias answers DELETE /1.0/images/aliases/{alias}.
func (a *API) deleteImageAlias(c *fiber.Ctx) error {
	s, err := a.imageService()
	if err != nil {
		return err
	}
	name, err := pathParam(c, "alias", "alias")
	if err != nil {
		return err
	}
	if err := s.DeleteAlias(c.UserContext(), name); err != nil {
		return err
	}
	return sync200(c, map[string]any{})
}
