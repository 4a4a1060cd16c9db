// Package images is the host's image store: disk images kept in the state
// directory under images/, named by the SHA-256 of their content, with their
// metadata and aliases in a MetadataStore (the daemon's database implements
// it). Import streams a file into the store (never holding it in memory)
// and, from a raw ext4 image, extracts the kernel and initrd for direct
// boot with debugfs (e2fsprogs; no mounts, no root). Backends are told an
// image's Files (the daemon converts them to the plugin contract's
// sdk.Image).
package images

import (
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/guestlink/guestlink/errdefs"
)

// ImageStore gives devlxd read access to the host's image store. It is a
// copy of the interface transport/devlxd declares for GET
// /1.0/images/{fingerprint}/export; Store implements it.
type ImageStore interface {
	// ImageFile returns the path of the image file whose sha256 fingerprint is fingerprint (full, lowercase hex)
	// and the file name to offer the client; an error wrapping errdefs.ErrNotFound if there is none or
	// guests may not download it (a private image).
	ImageFile(ctx context.Context, fingerprint string) (path, name string, err error)
}

var _ ImageStore = (*Store)(nil)

// Image is one disk image of the store: its file lives under Dir (named by
// fingerprint), its metadata in the MetadataStore.
type Image struct {
	Fingerprint string // SHA-256 of the disk file, lowercase hex
	Filename    string // the name the file was imported under
	Size        int64  // bytes of the disk file
	Format      string // FormatRaw or FormatQCOW2
	// Kernel and Initrd are true when a kernel (and initrd) for direct boot
	// were taken at import (files <fp>.kernel, <fp>.initrd).
	Kernel, Initrd bool
	Properties     map[string]string // os, release, build inputs, ...
	// Public is true when guests may download the image through devlxd
	// (LXD's public flag); false, the default, keeps it private.
	Public    bool
	CreatedAt time.Time
	// Aliases are the image's names, by name: filled by the Store's
	// Import, Get, List and Resolve; the MetadataStore neither reads nor
	// fills them (it keeps aliases apart, as Alias).
	Aliases []string
}

// Alias is a name of an image.
type Alias struct {
	Name        string
	Description string
	Target      string // the image's fingerprint
}

// MetadataStore keeps what the image store knows of its images (their files
// are the Store's): images by fingerprint and their aliases. The daemon's
// database implements it. All methods are safe for concurrent use; a nil
// return means the change is durable. Errors are errdefs kinds
// (ErrNotFound, ErrAlreadyExists, ErrInvalid).
type MetadataStore interface {
	// CreateImage stores im (not its Aliases) and, when alias is not "",
	// an alias for it in the same transaction; ErrAlreadyExists if the
	// fingerprint or the alias exists already.
	CreateImage(ctx context.Context, im *Image, alias string) error
	// Image returns the image with this fingerprint (no Aliases).
	Image(ctx context.Context, fingerprint string) (*Image, error)
	// Images lists the images, oldest first (no Aliases).
	Images(ctx context.Context) ([]*Image, error)
	// SetImagePublic sets the public flag of the image with this
	// fingerprint; ErrNotFound if there is none.
	SetImagePublic(ctx context.Context, fingerprint string, public bool) error
	// DeleteImage removes the image with this fingerprint and its aliases.
	DeleteImage(ctx context.Context, fingerprint string) error
	// CreateImageAlias names the image with fingerprint; ErrNotFound if
	// there is no such image, ErrAlreadyExists if the name is taken.
	CreateImageAlias(ctx context.Context, name, fingerprint, description string) error
	// ImageAlias returns the alias called name.
	ImageAlias(ctx context.Context, name string) (*Alias, error)
	// ImageAliases lists the aliases by name.
	ImageAliases(ctx context.Context) ([]*Alias, error)
	// DeleteImageAlias removes the alias called name.
	DeleteImageAlias(ctx context.Context, name string) error
}

// Files are the files of an image a backend boots from: the disk (of
// Format), and the kernel and initrd taken at import ("" when none).
type Files struct {
	Fingerprint string
	Disk        string
	Format      string
	Kernel      string
	Initrd      string
}

// InUse reports the instances whose disks are layered on the image with
// fingerprint fp; Delete refuses to remove an image in use.
type InUse func(ctx context.Context, fp string) ([]string, error)

// Store is the image store. Create it with Open.
type Store struct {
	dir   string
	db    MetadataStore
	inUse InUse
	log   *slog.Logger
	now   func() time.Time

	// commitMu serialises the end of imports and deletes (existence check,
	// files in place, row stored), so two imports of the same content never
	// remove each other's files.
	commitMu sync.Mutex

	lim     Limits
	claims  claims  // the space imports in progress still need
	running running // the imports in progress, for Imports
	builds  builds  // the image builds clients report (builds.go)
	// checkEvery is the bytes a copy processes between two free-space
	// checks; afterCheck, set by tests, runs after each check.
	checkEvery int64
	afterCheck func()
}

// Dir returns the store's directory inside a state directory.
func Dir(stateDir string) string { return filepath.Join(stateDir, "images") }

// Open returns the store kept in Dir(stateDir) (created 0700) with its
// metadata in st, importing within lim (zero fields: the defaults). inUse
// may be nil (nothing is in use). It removes the temporary files of
// imports a previous daemon left (stopped or killed mid-copy); call it
// once at daemon start, before any import.
func Open(stateDir string, st MetadataStore, inUse InUse, log *slog.Logger, lim Limits) (*Store, error) {
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
	if lim.MaxSize <= 0 {
		lim.MaxSize = DefaultMaxSize
	}
	s := &Store{dir: dir, db: st, inUse: inUse, log: log, now: time.Now, lim: lim, checkEvery: defaultCheckEvery}
	if err := s.removeTemporary(); err != nil {
		return nil, fmt.Errorf("opening the image store: %w", err)
	}
	return s, nil
}

// lockTemporary takes an exclusive flock on the temporary file of an
// import in progress, held until the returned file is closed: removeTemporary
// leaves a locked file alone (another process's import still running). The
// kernel drops the lock of a killed daemon.
func lockTemporary(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking the temporary file of an import: %w", err)
	}
	return f, nil
}

// temporaryInUse reports whether the temporary file path (an image's, or the base
// of a .kernel or .initrd) is locked by an import in progress.
func temporaryInUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// removeTemporary removes the temporary files of interrupted imports (those
// no running import holds locked).
func (s *Store) removeTemporary() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var n int
	var freed int64
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		base := strings.TrimSuffix(strings.TrimSuffix(p, ".kernel"), ".initrd")
		if temporaryInUse(base) {
			s.log.Warn("a temporary file of an import in progress in another process stays", "file", e.Name())
			continue
		}
		var blocks int64
		if fi, err := os.Lstat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				blocks = st.Blocks * 512
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the temporary file of an interrupted import: %w", err)
		}
		n++
		freed += blocks
	}
	if n > 0 {
		s.log.Info("removed the temporary files of interrupted imports", "files", n, "freed", sizeString(freed))
	}
	return nil
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
// stored already.
//
// Nothing of the host is at risk: only a regular file is opened (a FIFO,
// a device or a directory is refused before it is read, errdefs.ErrInvalid
// naming its type); the format is checked before anything is written (a
// raw ext filesystem or qcow2, else errdefs.ErrInvalid saying what was
// found); a file larger than Limits.MaxSize (apparent size) is refused
// with errdefs.ErrInvalid; the copy is sparse (holes and blocks of zeros
// stay holes) and its data must fit in the image directory's free space
// with Limits' reserve kept, checked before and during the copy
// (errdefs.ErrNoSpace, whose message names no host path). The copy stops
// as soon as ctx ends, and its temporary files are removed before Import
// returns.
func (s *Store) Import(ctx context.Context, path string, opts ImportOptions) (*Image, error) {
	wrap := func(err error) error { return s.importErr(path, opts, err) }
	if opts.Alias != "" {
		if err := ValidateAlias(opts.Alias); err != nil {
			return nil, wrap(err)
		}
	}
	if opts.Initrd != "" && opts.Kernel == "" {
		return nil, wrap(fmt.Errorf("an initrd needs a kernel: %w", errdefs.ErrInvalid))
	}
	src, err := s.openSource(path, "")
	if err != nil {
		return nil, wrap(err)
	}
	defer src.f.Close()
	head := make([]byte, headSize)
	hn, err := src.f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, wrap(fmt.Errorf("reading the file: %w", err))
	}
	format, err := detectFormat(head[:hn], src.size)
	if err != nil {
		return nil, wrap(fmt.Errorf("not a disk image: %w: %w", err, errdefs.ErrInvalid))
	}
	// The kernel and initrd given are opened and checked before anything
	// is written too.
	parts := []*source{src}
	for _, p := range []struct{ path, what string }{{opts.Kernel, "kernel"}, {opts.Initrd, "initrd"}} {
		if p.path == "" {
			continue
		}
		f, err := s.openSource(p.path, p.what)
		if err != nil {
			return nil, wrap(err)
		}
		defer f.f.Close()
		parts = append(parts, f)
	}
	var need int64
	for _, p := range parts {
		need += p.data
	}
	claim, err := s.claim(need)
	if err != nil {
		return nil, wrap(err)
	}
	defer claim.release()
	s.track(claim, path, opts.Alias, need)
	defer s.untrack(claim)

	tmp, err := os.CreateTemp(s.dir, tmpPrefix+"*")
	if err != nil {
		return nil, wrap(err)
	}
	tmpName := tmp.Name()
	kernelTmp, initrdTmp := tmpName+".kernel", tmpName+".initrd"
	lock, err := lockTemporary(tmpName)
	if err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmpName)
		return nil, wrap(err)
	}
	keep := false
	defer func() {
		_ = tmp.Close()
		if !keep {
			for _, p := range []string{tmpName, kernelTmp, initrdTmp} {
				_ = os.Remove(p)
			}
		}
		_ = lock.Close()
	}()
	h := sha256.New()
	if err := sparseCopy(ctx, src.f, tmp, src.size, h, claim); err != nil {
		return nil, wrap(fmt.Errorf("copying: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return nil, wrap(noSpace(err))
	}
	if err := tmp.Close(); err != nil {
		return nil, wrap(noSpace(err))
	}
	fp := hex.EncodeToString(h.Sum(nil))
	if _, err := s.db.Image(ctx, fp); err == nil {
		return nil, wrap(fmt.Errorf("an image with fingerprint %s exists: %w", fp, errdefs.ErrAlreadyExists))
	}
	im := &Image{Fingerprint: fp, Filename: opts.Filename, Size: src.size, Format: format, Properties: map[string]string{}, Public: opts.Public, CreatedAt: s.now().UTC()}
	if im.Filename == "" {
		im.Filename = filepath.Base(path)
	}
	for k, v := range opts.Properties {
		im.Properties[k] = v
	}
	// The kernel and initrd: given, or found in a raw ext4 image; kept
	// under temporary names until the image is committed.
	if len(parts) > 1 {
		for i, dst := range []string{kernelTmp, initrdTmp}[:len(parts)-1] {
			if err := copyPart(ctx, parts[i+1].f, dst, parts[i+1].size, claim); err != nil {
				return nil, wrap(fmt.Errorf("%s: %w", []string{"kernel", "initrd"}[i], err))
			}
		}
		im.Kernel, im.Initrd = true, len(parts) > 2
	} else if format == FormatRaw {
		k, i, err := extractBoot(ctx, tmpName, kernelTmp, initrdTmp)
		if ctx.Err() != nil {
			return nil, wrap(fmt.Errorf("taking the kernel from the image: %w", ctx.Err()))
		}
		if err != nil {
			s.log.Warn("no kernel taken from the image", "image", fp, "err", err)
		}
		if k != "" {
			im.Kernel, im.Properties["boot.kernel"] = true, k
		}
		if i != "" {
			im.Initrd, im.Properties["boot.initrd"] = true, i
		}
	}
	if err := os.Chmod(tmpName, 0o400); err != nil {
		return nil, wrap(err)
	}

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if _, err := s.db.Image(ctx, fp); err == nil {
		return nil, wrap(fmt.Errorf("an image with fingerprint %s exists: %w", fp, errdefs.ErrAlreadyExists))
	}
	var placed []string
	undo := func() {
		for _, p := range placed {
			_ = os.Remove(p)
		}
	}
	for _, mv := range []struct {
		from, to string
		has      bool
	}{{kernelTmp, s.kernelPath(fp), im.Kernel}, {initrdTmp, s.initrdPath(fp), im.Initrd}, {tmpName, s.diskPath(fp), true}} {
		if !mv.has {
			continue
		}
		if err := os.Rename(mv.from, mv.to); err != nil {
			undo()
			return nil, wrap(err)
		}
		placed = append(placed, mv.to)
	}
	keep = true
	if err := s.db.CreateImage(ctx, im, opts.Alias); err != nil {
		undo()
		return nil, wrap(err)
	}
	s.log.Info("image imported", "fingerprint", fp, "size", src.size, "data", src.data, "format", format, "alias", opts.Alias)
	im.Aliases = nil
	if opts.Alias != "" {
		im.Aliases = []string{opts.Alias}
	}
	return im, nil
}

// tmpPrefix starts the name of every temporary file of an import in the
// store directory; Open removes those an interrupted import left.
const tmpPrefix = ".import-"

// source is a file an import reads: open, regular, within the size limit.
type source struct {
	f    *os.File
	size int64 // apparent size
	data int64 // bytes in data extents (what a sparse copy writes at most)
}

// openSource opens the file at path for an import (what: "" for the image,
// "kernel" or "initrd"): a regular file no larger than Limits.MaxSize.
func (s *Store) openSource(path, what string) (*source, error) {
	name := "the file"
	if what != "" {
		name = "the " + what
	}
	f, fi, err := openRegular(path)
	if err != nil {
		if what != "" {
			err = fmt.Errorf("%s %s: %w", what, path, err)
		}
		return nil, err
	}
	if fi.Size() > s.lim.MaxSize {
		_ = f.Close()
		return nil, fmt.Errorf("%s is %s (its apparent size, holes included), more than the limit of %s (guestlinkd --image-max-size): %w",
			name, sizeString(fi.Size()), sizeString(s.lim.MaxSize), errdefs.ErrInvalid)
	}
	data, err := dataSize(f, fi.Size())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &source{f: f, size: fi.Size(), data: data}, nil
}

// copyPart copies a kernel or initrd into dst (0400) with sparseCopy.
func copyPart(ctx context.Context, src *os.File, dst string, size int64, c *claim) error {
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return err
	}
	if err := sparseCopy(ctx, src, out, size, sha256.New(), c); err != nil {
		_ = out.Close()
		return err
	}
	return noSpace(out.Close())
}

// importErr wraps an error of the import of path with its context. A
// client error (4xx) names the path the client gave; any other error is
// logged in full and answered without host paths (the store's directory,
// the files' directories).
func (s *Store) importErr(path string, opts ImportOptions, err error) error {
	if errdefs.HTTPStatus(err) < 500 {
		return fmt.Errorf("importing image %s: %w", path, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.log.Info("image import stopped: the request ended (client gone)", "path", path, "err", err)
	} else {
		s.log.Error("image import failed", "path", path, "err", err)
	}
	msg := err.Error()
	for _, p := range []string{s.dir, path, opts.Kernel, opts.Initrd} {
		if p == "" {
			continue
		}
		repl := filepath.Base(p)
		if p == s.dir {
			repl = "(image store)"
		}
		msg = strings.ReplaceAll(msg, p, repl)
	}
	for _, p := range []string{filepath.Dir(path), filepath.Dir(opts.Kernel), filepath.Dir(opts.Initrd)} {
		if p != "/" && p != "." {
			msg = strings.ReplaceAll(msg, p+"/", "")
		}
	}
	return &pathFree{msg: fmt.Sprintf("importing image %s: %s", filepath.Base(path), msg), err: err}
}

// pathFree is an error whose message has had host paths taken out; it
// still wraps the original (for errors.Is).
type pathFree struct {
	msg string
	err error
}

func (e *pathFree) Error() string { return e.msg }
func (e *pathFree) Unwrap() error { return e.err }

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
	if a, err := s.db.ImageAlias(ctx, ref); err == nil {
		return s.Get(ctx, a.Target)
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
	as, err := s.db.ImageAliases(ctx)
	if err != nil {
		return nil, err
	}
	im.Aliases = []string{}
	for _, a := range as {
		if a.Target == fp {
			im.Aliases = append(im.Aliases, a.Name)
		}
	}
	return im, nil
}

// List returns every image with its aliases, oldest first.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	list, err := s.db.Images(ctx)
	if err != nil {
		return nil, err
	}
	as, err := s.db.ImageAliases(ctx)
	if err != nil {
		return nil, err
	}
	byFP := map[string][]string{}
	for _, a := range as {
		byFP[a.Target] = append(byFP[a.Target], a.Name)
	}
	for _, im := range list {
		im.Aliases = byFP[im.Fingerprint]
		if im.Aliases == nil {
			im.Aliases = []string{}
		}
	}
	return list, nil
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

// Aliases lists the aliases by name, each with its image's fingerprint.
func (s *Store) Aliases(ctx context.Context) ([]*Alias, error) {
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

// Files returns the files a backend boots the image fp from.
func (s *Store) Files(ctx context.Context, fp string) (*Files, error) {
	im, err := s.db.Image(ctx, fp)
	if err != nil {
		return nil, err
	}
	out := &Files{Fingerprint: fp, Disk: s.diskPath(fp), Format: im.Format}
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

// Properties returns the recorded properties of the image fp (such as
// requirements.memory, which the instance service holds new guests to).
func (s *Store) Properties(ctx context.Context, fp string) (map[string]string, error) {
	im, err := s.db.Image(ctx, fp)
	if err != nil {
		return nil, err
	}
	return im.Properties, nil
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
