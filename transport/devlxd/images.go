package devlxd

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/errdefs"
)

// ImageStore gives devlxd read access to the host's image store.
type ImageStore interface {
	// ImageFile returns the path of the image file whose sha256 fingerprint is fingerprint (full, lowercase hex)
	// and the file name to offer the client; an error wrapping errdefs.ErrNotFound if there is none or
	// guests may not download it (LXD's rule: only public or cached images; a private one is Not Found).
	ImageFile(ctx context.Context, fingerprint string) (path, name string, err error)
}

// fingerprintRE is a full sha256 fingerprint; LXD's devlxd matches only
// full fingerprints exactly, so anything else is an unknown image.
var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// getImageExport serves GET /1.0/images/{fingerprint}/export as LXD: only
// with security.devlxd.images on (else 403), only in the default project,
// only a full fingerprint the image store knows (else 404); errors in the
// main API's envelope (the agent passes them through unchanged), the file
// inline as application/octet-stream.
func (s *Server) getImageExport(c *fiber.Ctx) error {
	inst := callerOf(c)
	if !guestview.ImagesEnabled(inst.Config) {
		return imageError(c, http.StatusForbidden)
	}
	if p := c.Query("project"); p != "" && p != "default" {
		return imageError(c, http.StatusNotFound)
	}
	fp, err := url.PathUnescape(c.Params("fingerprint"))
	if err != nil || !fingerprintRE.MatchString(fp) || s.cfg.Images == nil {
		return imageError(c, http.StatusNotFound)
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	path, name, err := s.cfg.Images.ImageFile(ctx, fp)
	if errors.Is(err, errdefs.ErrNotFound) {
		return imageError(c, http.StatusNotFound)
	}
	if err != nil {
		s.cfg.Logger.Error("devlxd: looking up image", "instance", inst.Name, "fingerprint", fp, "err", err)
		return imageError(c, http.StatusInternalServerError)
	}
	f, err := os.Open(path)
	if err != nil {
		s.cfg.Logger.Error("devlxd: opening image", "instance", inst.Name, "fingerprint", fp, "err", err)
		return imageError(c, http.StatusInternalServerError)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		s.cfg.Logger.Error("devlxd: image is not a readable file", "instance", inst.Name, "path", path, "err", err)
		return imageError(c, http.StatusInternalServerError)
	}
	if name == "" {
		name = fp
	}
	c.Status(http.StatusOK)
	c.Set(fiber.HeaderContentType, "application/octet-stream")
	c.Set(fiber.HeaderContentLength, strconv.FormatInt(st.Size(), 10))
	c.Set(fiber.HeaderContentDisposition, "inline;filename="+name)
	c.Set(fiber.HeaderLastModified, st.ModTime().UTC().Format(http.TimeFormat))
	// fasthttp closes f once the body is sent.
	c.Response().SetBodyStream(f, int(st.Size()))
	return nil
}

// imageError answers an image export with LXD's main-API error: the
// envelope with the status text, and X-Content-Type-Options: nosniff, as
// LXD's API errors carry (the agent relays both to the guest).
func imageError(c *fiber.Ctx, code int) error {
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return sendError(c, code, "")
}
