// Package storage is the daemon's storage: one directory pool ("default",
// driver "dir") of custom block volumes kept as sparse raw files under the
// state directory, with snapshots (full copies, holes kept). Volumes are
// attached to instances as disk devices (pool=default source=VOLUME); the
// records live in a Store (the daemon's database implements it), the bytes in
// DIR/storage-pools/<pool>/custom/<volume>.raw and
// DIR/storage-pools/<pool>/custom-snapshots/<volume>/<snapshot>.raw, all
// 0600 in 0700 directories.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// DefaultPool is the name of the one pool.
const DefaultPool = "default"

// Driver is the pool's driver name.
const Driver = "dir"

// DefaultSize is the size of a volume created without "size".
const DefaultSize = "10GiB"

// MaxSize bounds a volume's size (the files are sparse).
const MaxSize = 16 << 40

// Pool is a storage pool. The admin API answers it as api.StoragePool,
// devlxd as its own LXD-shaped object.
type Pool struct {
	Name        string
	Driver      string
	Status      string
	Description string
	Source      string // directory on the host
}

// Volume is a custom volume or a snapshot (Name "VOLUME/SNAPSHOT").
// The admin API answers it as api.StorageVolume, devlxd as its own
// LXD-shaped object, and db keeps a private row.
type Volume struct {
	Pool        string
	Name        string
	Type        string // "custom"
	ContentType string // "block"
	Description string
	Config      map[string]string
	CreatedAt   time.Time
	Location    string // "none": one host
}

// Store keeps the records of the volumes and snapshots (their files are
// the Service's). The daemon's database implements it (db's storage
// volumes table). All methods are safe for concurrent use; a nil return
// means the change is durable. Errors are errdefs kinds: ErrNotFound,
// ErrAlreadyExists, ErrInvalid.
type Store interface {
	// CreateStorageVolume stores v (its Pool, Name, ContentType,
	// Description, Config and CreatedAt); ErrAlreadyExists on a duplicate
	// pool and name.
	CreateStorageVolume(ctx context.Context, v *Volume) error
	// StorageVolume returns one volume or snapshot.
	StorageVolume(ctx context.Context, pool, name string) (*Volume, error)
	// StorageVolumes lists a pool's volumes and snapshots by name.
	StorageVolumes(ctx context.Context, pool string) ([]*Volume, error)
	// UpdateStorageVolume saves v's description and config (matched by
	// pool and name).
	UpdateStorageVolume(ctx context.Context, v *Volume) error
	// DeleteStorageVolume removes one volume or snapshot.
	DeleteStorageVolume(ctx context.Context, pool, name string) error
}

// UsedBy names the instances whose disk devices use a volume (the daemon
// looks them up in the instance service).
type UsedBy func(ctx context.Context, pool, volume string) ([]string, error)

// Service is the storage service. It is safe for concurrent use.
type Service struct {
	dir    string
	store  Store
	usedBy UsedBy
	log    *slog.Logger
	mu     sync.Mutex // serialises changes (file and record together)
}

// New returns the service keeping files under stateDir/storage-pools.
// usedBy may be nil (then nothing is in use).
func New(stateDir string, store Store, usedBy UsedBy, log *slog.Logger) (*Service, error) {
	if store == nil {
		return nil, fmt.Errorf("storage: a store is required: %w", errdefs.ErrInvalid)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{dir: filepath.Join(stateDir, "storage-pools"), store: store, usedBy: usedBy, log: log}
	for _, d := range []string{s.dir, s.poolDir(DefaultPool), s.volDir(DefaultPool), filepath.Join(s.poolDir(DefaultPool), "custom-snapshots")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
	}
	// Volume files a crash left half created were never stored.
	left, _ := filepath.Glob(filepath.Join(s.volDir(DefaultPool), tmpPrefix+"*"))
	for _, f := range left {
		if err := os.Remove(f); err == nil {
			log.Info("storage: removed a volume file left half created", "file", f)
		}
	}
	return s, nil
}

// SetUsedBy sets the lookup of instances using a volume (the instance
// service is made after the storage service).
func (s *Service) SetUsedBy(u UsedBy) {
	s.mu.Lock()
	s.usedBy = u
	s.mu.Unlock()
}

func (s *Service) poolDir(pool string) string { return filepath.Join(s.dir, pool) }
func (s *Service) volDir(pool string) string  { return filepath.Join(s.poolDir(pool), "custom") }

// Path returns the file of a volume, or of a snapshot ("VOLUME/SNAPSHOT").
func (s *Service) Path(pool, name string) string {
	if vol, snap, ok := strings.Cut(name, "/"); ok {
		return filepath.Join(s.poolDir(pool), "custom-snapshots", vol, snap+".raw")
	}
	return filepath.Join(s.volDir(pool), name+".raw")
}

// Pools lists the pools.
func (s *Service) Pools() []Pool {
	return []Pool{s.pool()}
}

func (s *Service) pool() Pool {
	return Pool{Name: DefaultPool, Driver: Driver, Status: "Created", Description: "Directory pool of raw block volumes", Source: s.poolDir(DefaultPool)}
}

// GetPool returns a pool by name.
func (s *Service) GetPool(name string) (*Pool, error) {
	if err := checkPool(name); err != nil {
		return nil, err
	}
	p := s.pool()
	return &p, nil
}

func checkPool(name string) error {
	if name != DefaultPool {
		return fmt.Errorf("storage pool %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// ValidateName checks a volume or snapshot name: 1 to 63 letters, digits,
// '-', '_' or '.', not starting with '.' or '-'.
func ValidateName(kind, name string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid %s name %q: %s: %w", kind, name, why, errdefs.ErrInvalid)
	}
	if name == "" || len(name) > 63 {
		return bad("1 to 63 characters")
	}
	if name[0] == '.' || name[0] == '-' {
		return bad("must not start with '.' or '-'")
	}
	for i, r := range name {
		if r != '-' && r != '_' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return bad(fmt.Sprintf("character %q at position %d is not a letter, digit, '-', '_' or '.'", r, i))
		}
	}
	return nil
}

// ParseSize parses a size such as "10GiB", "512MiB", "1GB" or a number of
// bytes.
func ParseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := v, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid size %q: want a positive size such as 10GiB or 512MiB: %w", v, errdefs.ErrInvalid)
	}
	if n > MaxSize/mult {
		return 0, fmt.Errorf("invalid size %q: at most 16TiB: %w", v, errdefs.ErrInvalid)
	}
	size := n * mult
	if size%512 != 0 {
		return 0, fmt.Errorf("invalid size %q: a block volume's size is a multiple of 512 bytes: %w", v, errdefs.ErrInvalid)
	}
	return size, nil
}

// KeyOwner records the devlxd identity that created a volume through
// devlxd (LXD's key); only that identity sees and manages it there.
const KeyOwner = "volatile.devlxd.owner"

// checkConfig checks a volume's config: only "size" and KeyOwner are known.
func checkConfig(cfg map[string]string) (int64, error) {
	for k := range cfg {
		if k != "size" && k != KeyOwner {
			return 0, fmt.Errorf("unknown volume config key %q (known: size): %w", k, errdefs.ErrInvalid)
		}
	}
	v := cfg["size"]
	if v == "" {
		v = DefaultSize
	}
	return ParseSize(v)
}

// volumeOf is the view of a stored volume: its own config map, type
// custom, location none.
func volumeOf(r *Volume) *Volume {
	cfg := maps.Clone(r.Config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	return &Volume{Pool: r.Pool, Name: r.Name, Type: "custom", ContentType: r.ContentType, Description: r.Description,
		Config: cfg, CreatedAt: r.CreatedAt, Location: "none"}
}

// CreateVolume creates a custom block volume: a sparse raw file of
// config["size"] (default 10GiB). contentType "" means "block"; only
// "block" is supported (the guests see virtio-blk disks).
func (s *Service) CreateVolume(ctx context.Context, pool, name, contentType, description string, config map[string]string) (*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	if err := ValidateName("volume", name); err != nil {
		return nil, err
	}
	if contentType == "" {
		contentType = "block"
	}
	if contentType != "block" {
		return nil, fmt.Errorf("content type %q is not supported by pool %s (driver dir keeps block volumes only): %w", contentType, pool, errdefs.ErrInvalid)
	}
	if config == nil {
		config = map[string]string{}
	}
	size, err := checkConfig(config)
	if err != nil {
		return nil, err
	}
	config = maps.Clone(config)
	if config["size"] == "" {
		config["size"] = DefaultSize
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The file first, under a temporary name: a size the pool's
	// filesystem cannot hold is refused before anything is stored.
	tmp, err := s.sparseTemp(pool, name, config["size"], size)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp) // a no-op once renamed
	rec := &Volume{Pool: pool, Name: name, ContentType: contentType, Description: description, Config: config, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateStorageVolume(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("storage volume %q already exists in pool %s: %w", name, pool, errdefs.ErrAlreadyExists)
		}
		return nil, err
	}
	if err := os.Rename(tmp, s.Path(pool, name)); err != nil {
		_ = s.store.DeleteStorageVolume(context.WithoutCancel(ctx), pool, name)
		return nil, fmt.Errorf("creating storage volume %s/%s: %w", pool, name, err)
	}
	s.log.Info("storage volume created", "pool", pool, "volume", name, "size", config["size"])
	return volumeOf(rec), nil
}

// tmpPrefix starts the name of a volume file being created; such files
// left by a crash are removed by New.
const tmpPrefix = ".creating-"

// sparseTemp creates the sparse file of a new volume of size bytes (v as
// given) under a temporary name in the pool and returns its path. A size
// larger than a file of the pool's filesystem may be (EFBIG: ext4 stops
// just short of 16TiB) is errdefs.ErrInvalid, saying so without the path.
func (s *Service) sparseTemp(pool, name, v string, size int64) (string, error) {
	f, err := os.CreateTemp(s.volDir(pool), tmpPrefix+name+"-*")
	if err != nil {
		return "", fmt.Errorf("creating storage volume %s/%s: %w", pool, name, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		if errors.Is(err, syscall.EFBIG) {
			return "", fmt.Errorf("storage volume %s/%s: size %s is more than a file on pool %s's filesystem can hold: %w", pool, name, v, pool, errdefs.ErrInvalid)
		}
		return "", fmt.Errorf("creating storage volume %s/%s: %w", pool, name, err)
	}
	return f.Name(), nil
}

// Volume returns a volume (or a snapshot, "VOLUME/SNAPSHOT").
func (s *Service) Volume(ctx context.Context, pool, name string) (*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	rec, err := s.store.StorageVolume(ctx, pool, name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, fmt.Errorf("storage volume %q in pool %q: %w", name, pool, errdefs.ErrNotFound)
		}
		return nil, err
	}
	return volumeOf(rec), nil
}

// CheckVolume returns nil when the custom volume exists (instance.VolumeChecker).
func (s *Service) CheckVolume(ctx context.Context, pool, name string) error {
	if strings.Contains(name, "/") {
		return fmt.Errorf("%q is a snapshot; only volumes can be attached: %w", name, errdefs.ErrInvalid)
	}
	_, err := s.Volume(ctx, pool, name)
	return err
}

// VolumePath returns the host file of an existing volume.
func (s *Service) VolumePath(ctx context.Context, pool, name string) (string, error) {
	if err := s.CheckVolume(ctx, pool, name); err != nil {
		return "", err
	}
	return s.Path(pool, name), nil
}

// Volumes lists a pool's volumes (snapshots excluded).
func (s *Service) Volumes(ctx context.Context, pool string) ([]*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	recs, err := s.store.StorageVolumes(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := []*Volume{}
	for _, r := range recs {
		if !strings.Contains(r.Name, "/") {
			out = append(out, volumeOf(r))
		}
	}
	return out, nil
}

// UpdateVolume sets a volume's description and config; a size may only
// grow (the file is extended, sparse).
func (s *Service) UpdateVolume(ctx context.Context, pool, name, description string, config map[string]string) (*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	if strings.Contains(name, "/") {
		return nil, fmt.Errorf("snapshot %q cannot be changed: %w", name, errdefs.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.store.StorageVolume(ctx, pool, name)
	if err != nil {
		return nil, fmt.Errorf("storage volume %q in pool %q: %w", name, pool, errdefs.ErrNotFound)
	}
	cfg := maps.Clone(rec.Config)
	for k, v := range config {
		cfg[k] = v
	}
	size, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	old, _ := ParseSize(rec.Config["size"])
	if size < old {
		return nil, fmt.Errorf("storage volume %s/%s: size %s is smaller than %s; volumes only grow: %w", pool, name, cfg["size"], rec.Config["size"], errdefs.ErrInvalid)
	}
	if size > old {
		if err := os.Truncate(s.Path(pool, name), size); err != nil {
			if errors.Is(err, syscall.EFBIG) {
				return nil, fmt.Errorf("storage volume %s/%s: size %s is more than a file on pool %s's filesystem can hold: %w", pool, name, cfg["size"], pool, errdefs.ErrInvalid)
			}
			return nil, fmt.Errorf("growing storage volume %s/%s: %w", pool, name, err)
		}
	}
	rec.Config, rec.Description = cfg, description
	if err := s.store.UpdateStorageVolume(ctx, rec); err != nil {
		return nil, err
	}
	return volumeOf(rec), nil
}

// DeleteVolume deletes a volume and its snapshots, or one snapshot
// ("VOLUME/SNAPSHOT"). A volume an instance uses is refused
// (errdefs.ErrConflict).
func (s *Service) DeleteVolume(ctx context.Context, pool, name string) error {
	if err := checkPool(pool); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.store.StorageVolume(ctx, pool, name); err != nil {
		return fmt.Errorf("storage volume %q in pool %q: %w", name, pool, errdefs.ErrNotFound)
	}
	if vol, _, isSnap := strings.Cut(name, "/"); isSnap {
		if err := s.store.DeleteStorageVolume(ctx, pool, name); err != nil {
			return err
		}
		if err := os.Remove(s.Path(pool, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("deleting snapshot file of %s/%s: %w", pool, name, err)
		}
		s.log.Info("storage volume snapshot deleted", "pool", pool, "volume", vol, "snapshot", name)
		return nil
	}
	if s.usedBy != nil {
		users, err := s.usedBy(ctx, pool, name)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("storage volume %s/%s is used by instance %s (remove the disk device first): %w", pool, name, strings.Join(users, ", "), errdefs.ErrConflict)
		}
	}
	recs, err := s.store.StorageVolumes(ctx, pool)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Name, name+"/") {
			if err := s.store.DeleteStorageVolume(ctx, pool, r.Name); err != nil {
				return err
			}
		}
	}
	if err := s.store.DeleteStorageVolume(ctx, pool, name); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(s.poolDir(pool), "custom-snapshots", name)); err != nil {
		return fmt.Errorf("deleting snapshots of %s/%s: %w", pool, name, err)
	}
	if err := os.Remove(s.Path(pool, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting volume file of %s/%s: %w", pool, name, err)
	}
	s.log.Info("storage volume deleted", "pool", pool, "volume", name)
	return nil
}

// CreateSnapshot snapshots a volume: a copy of its file (holes kept) as
// "VOLUME/SNAPSHOT".
func (s *Service) CreateSnapshot(ctx context.Context, pool, volume, snapshot, description string) (*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	if err := ValidateName("snapshot", snapshot); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err := s.store.StorageVolume(ctx, pool, volume)
	if err != nil || strings.Contains(volume, "/") {
		return nil, fmt.Errorf("storage volume %q in pool %q: %w", volume, pool, errdefs.ErrNotFound)
	}
	rec := &Volume{Pool: pool, Name: volume + "/" + snapshot, ContentType: src.ContentType, Description: description,
		Config: maps.Clone(src.Config), CreatedAt: time.Now().UTC()}
	if err := s.store.CreateStorageVolume(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("snapshot %q of storage volume %s/%s already exists: %w", snapshot, pool, volume, errdefs.ErrAlreadyExists)
		}
		return nil, err
	}
	dst := s.Path(pool, rec.Name)
	if err := copySparse(s.Path(pool, volume), dst); err != nil {
		_ = s.store.DeleteStorageVolume(context.WithoutCancel(ctx), pool, rec.Name)
		return nil, fmt.Errorf("snapshotting %s/%s: %w", pool, volume, err)
	}
	s.log.Info("storage volume snapshot created", "pool", pool, "volume", volume, "snapshot", snapshot)
	return volumeOf(rec), nil
}

// CopyVolume creates the custom volume name as a copy of source, a volume
// or a snapshot ("VOLUME/SNAPSHOT") of the same pool: the same bytes (holes
// kept), the same content type and size; config adds to (and overrides)
// the source's config, whose KeyOwner is not carried over. A source that
// does not exist is errdefs.ErrNotFound, a taken name
// errdefs.ErrAlreadyExists.
func (s *Service) CopyVolume(ctx context.Context, pool, name, source, description string, config map[string]string) (*Volume, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	if err := ValidateName("volume", name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err := s.store.StorageVolume(ctx, pool, source)
	if err != nil {
		return nil, fmt.Errorf("source storage volume %q in pool %q: %w", source, pool, errdefs.ErrNotFound)
	}
	cfg := maps.Clone(src.Config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	delete(cfg, KeyOwner)
	maps.Copy(cfg, config)
	if _, err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if cfg["size"] != src.Config["size"] {
		return nil, fmt.Errorf("copying storage volume %s/%s: a copy keeps the source's size %s: %w", pool, source, src.Config["size"], errdefs.ErrInvalid)
	}
	rec := &Volume{Pool: pool, Name: name, ContentType: src.ContentType, Description: description, Config: cfg, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateStorageVolume(ctx, rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("storage volume %q already exists in pool %s: %w", name, pool, errdefs.ErrAlreadyExists)
		}
		return nil, err
	}
	tmp := filepath.Join(s.volDir(pool), tmpPrefix+name+"-copy")
	_ = os.Remove(tmp)
	err = copySparse(s.Path(pool, source), tmp)
	if err == nil {
		err = os.Rename(tmp, s.Path(pool, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		_ = s.store.DeleteStorageVolume(context.WithoutCancel(ctx), pool, name)
		return nil, fmt.Errorf("copying storage volume %s/%s to %s: %w", pool, source, name, err)
	}
	s.log.Info("storage volume copied", "pool", pool, "volume", name, "source", source)
	return volumeOf(rec), nil
}

// SnapshotPattern names the snapshots made without a name, as LXD's
// default snapshots.pattern: snap0, snap1, ...
const SnapshotPattern = "snap%d"

// NextSnapshotName returns the name LXD gives a snapshot of volume made
// without one: "snap" and one more than the highest N of the volume's
// snapshots named snapN (snap0 for the first).
func (s *Service) NextSnapshotName(ctx context.Context, pool, volume string) (string, error) {
	snaps, err := s.Snapshots(ctx, pool, volume)
	if err != nil {
		return "", err
	}
	next := 0
	for _, sn := range snaps {
		_, snap, _ := strings.Cut(sn.Name, "/")
		var n int
		if c, err := fmt.Sscanf(snap, SnapshotPattern, &n); err == nil && c == 1 && n >= next {
			next = n + 1
		}
	}
	return fmt.Sprintf(SnapshotPattern, next), nil
}

// Snapshots lists a volume's snapshots.
func (s *Service) Snapshots(ctx context.Context, pool, volume string) ([]*Volume, error) {
	if _, err := s.Volume(ctx, pool, volume); err != nil || strings.Contains(volume, "/") {
		return nil, fmt.Errorf("storage volume %q in pool %q: %w", volume, pool, errdefs.ErrNotFound)
	}
	recs, err := s.store.StorageVolumes(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := []*Volume{}
	for _, r := range recs {
		if strings.HasPrefix(r.Name, volume+"/") {
			out = append(out, volumeOf(r))
		}
	}
	return out, nil
}

// copySparse copies src to a new file dst (0600), skipping blocks of
// zeros so holes stay holes.
func copySparse(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		out.Close()
		os.Remove(dst)
		return err
	}
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 && !allZero(buf[:n]) {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				return fail(werr)
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return fail(err)
	}
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	return out.Close()
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
