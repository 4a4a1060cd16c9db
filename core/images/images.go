// Package images is the host's image store: disk images kept in the state
// directory under images/, named by the SHA-256 of their content, with their
// metadata and aliases in the database (db.ImageStore). Import streams a
// file into the store (never holding it in memory) and, from a raw ext4
// image, extracts the kernel and initrd for direct boot with debugfs
// (e2fsprogs; no mounts, no root). Backends get an image as an sdk.Image.
package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// ImageStore gives devlxd read access to the host's image store. It is a
// copy of the interface core/devlxd declares for GET
// /1.0/images/{fingerprint}/export; Store implements it.
type ImageStore interface {
	// ImageFile returns the path of the image file whose sha256 fingerprint is fingerprint (full, lowercase hex)
	// and the file name to offer the client; an error wrapping errdefs.ErrNotFound if there is none or
	// guests may not download it (a private image).
	ImageFile(ctx context.Context, fingerprint string) (path, name string, err error)
}

var _ ImageStore = (*Store)(nil)

// Image is one image of the store with its aliases.
type Image struct {
	db.Image
	Aliases []string
}

// InUse reports the instances whose disks are layered on the image with
// fingerprint fp; Delete refuses to remove an image in use.
type InUse func(ctx context.Context, fp string) ([]string, error)

// Store is the image store. Create it with Open.
type Store struct {
	dir   string
	db    db.ImageStore
	inUse InUse
	log   *slog.Logger
	now   func() time.Time

	// commitMu serialises the end of imports and deletes (existence check,
	// files in place, row stored), so two imports of the same content never
	// remove each other's files.
	commitMu sync.Mutex
}

// Dir returns the store's directory inside a state directory.
func Dir(stateDir string) string { return filepath.Join(stateDir, "images") }

// Open returns the store kept in Dir(stateDir) (created 0700) with its
// metadata in st. inUse may be nil (nothing is in use).
func Open(stateDir string, st db.ImageStore, inUse InUse, log *slog.Logger) (*Store, error) {
	if st == nil {
		return nil, errors.New("opening the image store: a database is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := Dir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening the image store: %w", err)
	}
	return &Store{dir: dir, db: st, inUse: inUse, log: log, now: time.Now}, nil
}

// The file names of an image's parts in the store directory.
func (s *Store) diskPath(fp string) string   { return filepath.Join(s.dir, fp) }
func (s *Store) kernelPath(fp string) string { return filepath.Join(s.dir, fp+".kernel") }
func (s *Store) initrdPath(fp string) string { return filepath.Join(s.dir, fp+".initrd") }

// ImportOptions are the choices of Import.
type ImportOptions struct {
	Alias      string            // a first alias, or ""
	Filename   string            // the name to record (default: the source's base name)
	Properties map[string]string // metadata to record (os, release, build inputs)
	// Public lets guests download the image through devlxd (with
	// security.devlxd.images=true); an image is private by default.
	Public bool
	// Kernel and Initrd are files to use for direct boot instead of those
	// found in the image.
	Kernel, Initrd string
}

// aliasRE is what an alias may be: LXD allows more, but an alias also names
// an image on the command line (launch IMAGE NAME) and in URLs.
var aliasRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

// ValidateAlias checks an alias name (errdefs.ErrInvalid if bad).
func ValidateAlias(name string) error {
	if !aliasRE.MatchString(name) {
		return fmt.Errorf("invalid image alias %q: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 255: %w", name, errdefs.ErrInvalid)
	}
	if isHex(name) && len(name) >= minPrefix {
		return fmt.Errorf("invalid image alias %q: it would read as a fingerprint: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

// Import copies the image file at path into the store, streaming it
// through SHA-256, and records it with opts. The answer is the stored
// image; errdefs.ErrAlreadyExists if an image with the same content is
// stored already, errdefs.ErrInvalid for a file that is no disk image.
func (s *Store) Import(ctx context.Context, path string, opts ImportOptions) (*Image, error) {
	wrap := func(err error) error { return fmt.Errorf("importing image %s: %w", path, err) }
	if opts.Alias != "" {
		if err := ValidateAlias(opts.Alias); err != nil {
			return nil, wrap(err)
		}
	}
	if opts.Initrd != "" && opts.Kernel == "" {
		return nil, wrap(fmt.Errorf("an initrd needs a kernel: %w", errdefs.ErrInvalid))
	}
	if !filepath.IsAbs(path) {
		return nil, wrap(fmt.Errorf("the path must be absolute: %w", errdefs.ErrInvalid))
	}
	src, err := os.Open(path)
	if err != nil {
		return nil, wrap(fileErr(err))
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil {
		return nil, wrap(err)
	} else if !fi.Mode().IsRegular() {
		return nil, wrap(fmt.Errorf("not a regular file: %w", errdefs.ErrInvalid))
	}
	tmp, err := os.CreateTemp(s.dir, ".import-*")
	if err != nil {
		return nil, wrap(err)
	}
	tmpName := tmp.Name()
	keep := false
	defer func() {
		if !keep {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	h := sha256.New()
	head := &headBuf{max: 4096}
	n, err := io.Copy(io.MultiWriter(tmp, h, head), &ctxReader{ctx: ctx, r: src})
	if err != nil {
		return nil, wrap(fmt.Errorf("copying: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return nil, wrap(err)
	}
	if err := tmp.Close(); err != nil {
		return nil, wrap(err)
	}
	fp := hex.EncodeToString(h.Sum(nil))
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	format := "raw"
	switch {
	case bytes.HasPrefix(head.b, []byte("QFI\xfb")):
		format = "qcow2"
	case n < 1<<20:
		return nil, wrap(fmt.Errorf("%d bytes is too small for a disk image (a raw image of at least 1 MiB or a qcow2 file): %w", n, errdefs.ErrInvalid))
	}
	if _, err := s.db.Image(ctx, fp); err == nil {
		return nil, wrap(fmt.Errorf("an image with fingerprint %s exists: %w", fp, errdefs.ErrAlreadyExists))
	}
	im := &db.Image{Fingerprint: fp, Filename: opts.Filename, Size: n, Format: format, Properties: map[string]string{}, Public: opts.Public, CreatedAt: s.now().UTC()}
	if im.Filename == "" {
		im.Filename = filepath.Base(path)
	}
	for k, v := range opts.Properties {
		im.Properties[k] = v
	}
	// The kernel and initrd: given, or found in a raw ext4 image.
	var parts []string
	cleanup := func() {
		for _, p := range parts {
			_ = os.Remove(p)
		}
	}
	if opts.Kernel != "" {
		if err := copyFile(ctx, opts.Kernel, s.kernelPath(fp)); err != nil {
			cleanup()
			return nil, wrap(fmt.Errorf("kernel: %w", err))
		}
		parts = append(parts, s.kernelPath(fp))
		im.Kernel = true
		if opts.Initrd != "" {
			if err := copyFile(ctx, opts.Initrd, s.initrdPath(fp)); err != nil {
				cleanup()
				return nil, wrap(fmt.Errorf("initrd: %w", err))
			}
			parts = append(parts, s.initrdPath(fp))
			im.Initrd = true
		}
	} else if format == "raw" && isExt(head.b) {
		k, i, err := extractBoot(ctx, tmpName, s.kernelPath(fp), s.initrdPath(fp))
		if err != nil {
			s.log.Warn("no kernel taken from the image", "image", fp, "err", err)
		}
		if k != "" {
			parts = append(parts, s.kernelPath(fp))
			im.Kernel, im.Properties["boot.kernel"] = true, k
		}
		if i != "" {
			parts = append(parts, s.initrdPath(fp))
			im.Initrd, im.Properties["boot.initrd"] = true, i
		}
	}
	if err := os.Chmod(tmpName, 0o400); err != nil {
		cleanup()
		return nil, wrap(err)
	}
	if err := os.Rename(tmpName, s.diskPath(fp)); err != nil {
		cleanup()
		return nil, wrap(err)
	}
	keep = true
	if err := s.db.CreateImage(ctx, im, opts.Alias); err != nil {
		cleanup()
		_ = os.Remove(s.diskPath(fp))
		return nil, wrap(err)
	}
	s.log.Info("image imported", "fingerprint", fp, "size", n, "format", format, "alias", opts.Alias)
	out := &Image{Image: *im}
	if opts.Alias != "" {
		out.Aliases = []string{opts.Alias}
	}
	return out, nil
}

// minPrefix is the shortest fingerprint prefix Resolve accepts.
const minPrefix = 8

func isHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return s != ""
}

// Resolve finds an image by alias, fingerprint or unique fingerprint
// prefix (at least 8 hex digits). errdefs.ErrNotFound if none matches,
// errdefs.ErrInvalid for an ambiguous prefix.
func (s *Store) Resolve(ctx context.Context, ref string) (*Image, error) {
	if ref == "" {
		return nil, fmt.Errorf("finding image: a name or fingerprint is required: %w", errdefs.ErrInvalid)
	}
	if _, fp, err := s.db.ImageAlias(ctx, ref); err == nil {
		return s.Get(ctx, fp)
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("finding image %q: %w", ref, err)
	}
	ref = strings.ToLower(ref)
	if len(ref) == sha256.Size*2 && isHex(ref) {
		return s.Get(ctx, ref)
	}
	if len(ref) >= minPrefix && isHex(ref) {
		list, err := s.db.Images(ctx)
		if err != nil {
			return nil, fmt.Errorf("finding image %q: %w", ref, err)
		}
		var found []string
		for _, im := range list {
			if strings.HasPrefix(im.Fingerprint, ref) {
				found = append(found, im.Fingerprint)
			}
		}
		switch len(found) {
		case 1:
			return s.Get(ctx, found[0])
		case 0:
		default:
			return nil, fmt.Errorf("finding image %q: the prefix matches %d images: %w", ref, len(found), errdefs.ErrInvalid)
		}
	}
	return nil, fmt.Errorf("image %q: no image has this alias or fingerprint: %w", ref, errdefs.ErrNotFound)
}

// Get returns the image with fingerprint fp and its aliases.
func (s *Store) Get(ctx context.Context, fp string) (*Image, error) {
	im, err := s.db.Image(ctx, fp)
	if err != nil {
		return nil, err
	}
	as, fps, err := s.db.ImageAliases(ctx)
	if err != nil {
		return nil, err
	}
	out := &Image{Image: *im, Aliases: []string{}}
	for i, a := range as {
		if fps[i] == fp {
			out.Aliases = append(out.Aliases, a.Name)
		}
	}
	return out, nil
}

// List returns every image with its aliases, oldest first.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	list, err := s.db.Images(ctx)
	if err != nil {
		return nil, err
	}
	as, fps, err := s.db.ImageAliases(ctx)
	if err != nil {
		return nil, err
	}
	byFP := map[string][]string{}
	for i, a := range as {
		byFP[fps[i]] = append(byFP[fps[i]], a.Name)
	}
	out := make([]*Image, len(list))
	for i, im := range list {
		out[i] = &Image{Image: *im, Aliases: byFP[im.Fingerprint]}
		if out[i].Aliases == nil {
			out[i].Aliases = []string{}
		}
	}
	return out, nil
}

// Delete removes the image with fingerprint fp, its files and aliases;
// errdefs.ErrConflict while an instance's disk is layered on it.
func (s *Store) Delete(ctx context.Context, fp string) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if _, err := s.db.Image(ctx, fp); err != nil {
		return err
	}
	if s.inUse != nil {
		users, err := s.inUse(ctx, fp)
		if err != nil {
			return fmt.Errorf("deleting image %s: %w", fp, err)
		}
		if len(users) > 0 {
			return fmt.Errorf("deleting image %s: used by instance(s) %s: %w", fp, strings.Join(users, ", "), errdefs.ErrConflict)
		}
	}
	if err := s.db.DeleteImage(ctx, fp); err != nil {
		return err
	}
	for _, p := range []string{s.diskPath(fp), s.kernelPath(fp), s.initrdPath(fp)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("removing a deleted image's file", "path", p, "err", err)
		}
	}
	s.log.Info("image deleted", "fingerprint", fp)
	return nil
}

// AddAlias names the image with fingerprint fp.
func (s *Store) AddAlias(ctx context.Context, name, fp, description string) error {
	if err := ValidateAlias(name); err != nil {
		return err
	}
	return s.db.CreateImageAlias(ctx, name, fp, description)
}

// DeleteAlias removes an alias (the image stays).
func (s *Store) DeleteAlias(ctx context.Context, name string) error {
	return s.db.DeleteImageAlias(ctx, name)
}

// Aliases lists the aliases by name with their fingerprints.
func (s *Store) Aliases(ctx context.Context) ([]*db.ImageAlias, []string, error) {
	return s.db.ImageAliases(ctx)
}

// ImageFile returns the disk file of the image fingerprint (full, lowercase
// hex) and the name it was imported under, when guests may download it:
// only a public image (LXD lets guests download public and cached images;
// the store has no cached ones, every image is imported by an
// administrator). A private image is errdefs.ErrNotFound, as if absent.
func (s *Store) ImageFile(ctx context.Context, fingerprint string) (string, string, error) {
	if len(fingerprint) != sha256.Size*2 || !isHex(fingerprint) {
		return "", "", fmt.Errorf("image %q: a fingerprint is 64 lowercase hex digits: %w", fingerprint, errdefs.ErrNotFound)
	}
	im, err := s.db.Image(ctx, fingerprint)
	if err != nil {
		return "", "", err
	}
	if !im.Public {
		return "", "", fmt.Errorf("image %s is private (guestlink image set IMAGE public=true): %w", fingerprint, errdefs.ErrNotFound)
	}
	return s.diskPath(fingerprint), im.Filename, nil
}

// SetPublic sets whether guests may download the image ref (alias,
// fingerprint or unique prefix) through devlxd, and returns it.
func (s *Store) SetPublic(ctx context.Context, ref string, public bool) (*Image, error) {
	im, err := s.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := s.db.SetImagePublic(ctx, im.Fingerprint, public); err != nil {
		return nil, err
	}
	s.log.Info("image public flag set", "fingerprint", im.Fingerprint, "public", public)
	im.Public = public
	return im, nil
}

// Spec returns what a backend is told about the image fp.
func (s *Store) Spec(ctx context.Context, fp string) (*sdk.Image, error) {
	im, err := s.db.Image(ctx, fp)
	if err != nil {
		return nil, err
	}
	out := &sdk.Image{Fingerprint: fp, Path: s.diskPath(fp), Format: im.Format}
	if im.Kernel {
		out.Kernel = s.kernelPath(fp)
	}
	if im.Initrd {
		out.Initrd = s.initrdPath(fp)
	}
	return out, nil
}

func fileErr(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: %w", err, errdefs.ErrForbidden)
	}
	return err
}

// copyFile copies src to dst (0400), streaming.
func copyFile(ctx context.Context, src, dst string) error {
	if !filepath.IsAbs(src) {
		return fmt.Errorf("%s: the path must be absolute: %w", src, errdefs.ErrInvalid)
	}
	in, err := os.Open(src)
	if err != nil {
		return fileErr(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, &ctxReader{ctx: ctx, r: in}); err != nil {
		_ = out.Close()
		_ = os.Remove(dst)
		return err
	}
	if err := out.Close(); err != nil {
		_ = os.Remove(dst)
		return err
	}
	return nil
}

// headBuf keeps the first max bytes written to it.
type headBuf struct {
	b   []byte
	max int
}

func (h *headBuf) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// ctxReader ends a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Fingerprint resolves ref (alias, fingerprint or unique prefix) to the
// fingerprint of its image (see Resolve).
func (s *Store) Fingerprint(ctx context.Context, ref string) (string, error) {
	im, err := s.Resolve(ctx, ref)
	if err != nil {
		return "", err
	}
	return im.Fingerprint, nil
}
