package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/db/dbtest"
	"github.com/guestlink/guestlink/errdefs"
)

func newService(t *testing.T, used map[string][]string) *storage.Service {
	t.Helper()
	st := dbtest.SQLite(t)
	s, err := storage.New(t.TempDir(), st.(storage.Store), func(_ context.Context, pool, vol string) ([]string, error) {
		return used[pool+"/"+vol], nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVolumes(t *testing.T) {
	ctx := context.Background()
	s := newService(t, map[string][]string{"default/busy": {"web1"}})
	v, err := s.CreateVolume(ctx, "default", "vol1", "", "data", map[string]string{"size": "4MiB"})
	if err != nil {
		t.Fatal(err)
	}
	if v.ContentType != "block" || v.Type != "custom" || v.Config["size"] != "4MiB" {
		t.Fatalf("created %+v", v)
	}
	fi, err := os.Stat(s.Path("default", "vol1"))
	if err != nil || fi.Size() != 4<<20 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("volume file: %v %v", fi, err)
	}
	for _, tt := range []struct {
		name, pool, vol, ctype string
		cfg                    map[string]string
		want                   error
		msg                    string
	}{
		{"duplicate", "default", "vol1", "", nil, errdefs.ErrAlreadyExists, `storage volume "vol1" already exists in pool default`},
		{"unknown pool", "fast", "v", "", nil, errdefs.ErrNotFound, `storage pool "fast"`},
		{"bad name", "default", "a/b", "", nil, errdefs.ErrInvalid, `invalid volume name "a/b"`},
		{"filesystem", "default", "fs", "filesystem", nil, errdefs.ErrInvalid, `content type "filesystem" is not supported`},
		{"bad size", "default", "v", "", map[string]string{"size": "lots"}, errdefs.ErrInvalid, `invalid size "lots"`},
		{"odd size", "default", "v", "", map[string]string{"size": "1000"}, errdefs.ErrInvalid, "multiple of 512"},
		{"unknown key", "default", "v", "", map[string]string{"zfs.x": "1"}, errdefs.ErrInvalid, `unknown volume config key "zfs.x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.CreateVolume(ctx, tt.pool, tt.vol, tt.ctype, "", tt.cfg); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	// Write data, snapshot, change the volume: the snapshot keeps the old bytes.
	if err := os.WriteFile(s.Path("default", "vol1"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.Path("default", "vol1"), 4<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, "default", "vol1", "snap0", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path("default", "vol1"), []byte("after!"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(s.Path("default", "vol1/snap0"))
	if err != nil || len(got) != 4<<20 || string(got[:6]) != "before" {
		t.Fatalf("snapshot: %d bytes %q %v", len(got), got[:6], err)
	}
	if _, err := s.CreateSnapshot(ctx, "default", "vol1", "snap0", ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate snapshot: %v", err)
	}
	snaps, err := s.Snapshots(ctx, "default", "vol1")
	if err != nil || len(snaps) != 1 || snaps[0].Name != "vol1/snap0" {
		t.Fatalf("snapshots %+v %v", snaps, err)
	}
	vols, err := s.Volumes(ctx, "default")
	if err != nil || len(vols) != 1 {
		t.Fatalf("volumes (snapshots excluded) %+v %v", vols, err)
	}
	// Grow, never shrink.
	if _, err := s.UpdateVolume(ctx, "default", "vol1", "bigger", map[string]string{"size": "8MiB"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.Path("default", "vol1")); fi.Size() != 8<<20 {
		t.Fatalf("grown to %d", fi.Size())
	}
	if _, err := s.UpdateVolume(ctx, "default", "vol1", "", map[string]string{"size": "1MiB"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("shrink: %v", err)
	}
	// In use: refused.
	if _, err := s.CreateVolume(ctx, "default", "busy", "", "", map[string]string{"size": "1MiB"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, "default", "busy"); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "used by instance web1") {
		t.Fatalf("delete of a used volume: %v", err)
	}
	// Delete takes the snapshots along.
	if err := s.DeleteVolume(ctx, "default", "vol1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path("default", "vol1/snap0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot file left: %v", err)
	}
	if _, err := s.Volume(ctx, "default", "vol1/snap0"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("snapshot record left: %v", err)
	}
	if err := s.DeleteVolume(ctx, "default", "vol1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestVolumeLargerThanFilesystemAllows creates and grows volumes past the
// largest file the filesystem allows, made 1TiB here with RLIMIT_FSIZE
// (the kernel then answers EFBIG, as ext4 does just short of 16TiB): each
// is refused as invalid with a message that names no host path, and
// nothing is stored, no file left. A file a crash left half created is
// removed when the service starts.
func TestVolumeLargerThanFilesystemAllows(t *testing.T) {
	ctx := context.Background()
	s := newService(t, nil)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	small := lim
	small.Cur = 1 << 40
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim) })
	volDir := filepath.Dir(s.Path("default", "x"))
	stateDir := filepath.Dir(filepath.Dir(filepath.Dir(volDir)))

	_, err := s.CreateVolume(ctx, "default", "big", "", "", map[string]string{"size": "2TiB"})
	if want := "storage volume default/big: size 2TiB is more than a file on pool default's filesystem can hold: invalid argument"; !errors.Is(err, errdefs.ErrInvalid) || err.Error() != want {
		t.Fatalf("2TiB volume: %v, want %q", err, want)
	}
	if vols, err := s.Volumes(ctx, "default"); err != nil || len(vols) != 0 {
		t.Fatalf("after the refusal: volumes %v, %v", vols, err)
	}
	if left, _ := os.ReadDir(volDir); len(left) != 0 {
		t.Fatalf("after the refusal the pool holds %v", left)
	}

	if _, err := s.CreateVolume(ctx, "default", "grow", "", "", map[string]string{"size": "4MiB"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateVolume(ctx, "default", "grow", "", map[string]string{"size": "2TiB"})
	if want := "storage volume default/grow: size 2TiB is more than a file on pool default's filesystem can hold: invalid argument"; !errors.Is(err, errdefs.ErrInvalid) || err.Error() != want {
		t.Fatalf("growing to 2TiB: %v, want %q", err, want)
	}
	if v, err := s.Volume(ctx, "default", "grow"); err != nil || v.Config["size"] != "4MiB" {
		t.Fatalf("after the refused growth: %+v, %v", v, err)
	}

	half := filepath.Join(volDir, ".creating-crashed-123")
	if err := os.WriteFile(half, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.New(stateDir, dbtest.SQLite(t).(storage.Store), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a half-created volume file after New: %v", err)
	}
	if _, err := os.Stat(s.Path("default", "grow")); err != nil {
		t.Fatalf("New removed a real volume: %v", err)
	}
}

func TestCopyVolume(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	if _, err := s.CreateVolume(ctx, "default", "src", "", "", map[string]string{"size": "2MiB", storage.KeyOwner: "devlxd/csi"}); err != nil {
		t.Fatal(err)
	}
	write := func(data string, at int64) {
		t.Helper()
		f, err := os.OpenFile(s.Path("default", "src"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte(data), at); err != nil {
			t.Fatal(err)
		}
	}
	write("at the snapshot", 1<<20)
	if _, err := s.CreateSnapshot(ctx, "default", "src", "s0", ""); err != nil {
		t.Fatal(err)
	}
	write("after", 0)
	for _, tt := range []struct{ name, source string }{{"fromvol", "src"}, {"fromsnap", "src/s0"}} {
		v, err := s.CopyVolume(ctx, "default", tt.name, tt.source, "copy", map[string]string{storage.KeyOwner: "devlxd/new"})
		if err != nil {
			t.Fatalf("copy of %s: %v", tt.source, err)
		}
		// The source's size and content type; the owner the caller gives.
		if v.Config["size"] != "2MiB" || v.Config[storage.KeyOwner] != "devlxd/new" || v.ContentType != "block" || v.Description != "copy" {
			t.Errorf("copy of %s: %+v", tt.source, v)
		}
		want, _ := os.ReadFile(s.Path("default", tt.source))
		got, err := os.ReadFile(s.Path("default", tt.name))
		if err != nil || string(got) != string(want) {
			t.Errorf("copy of %s: the bytes differ (%v)", tt.source, err)
		}
		if fi, err := os.Stat(s.Path("default", tt.name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("copy of %s: %v %v, want mode 0600", tt.source, fi, err)
		}
	}
	if got, _ := os.ReadFile(s.Path("default", "fromsnap")); strings.HasPrefix(string(got), "after") {
		t.Error("the copy of the snapshot has the volume's later bytes")
	}
	for _, tt := range []struct {
		name, dst, source string
		config            map[string]string
		want              error
	}{
		{"missing source", "x", "nope", nil, errdefs.ErrNotFound},
		{"the source's owner not carried over", "x", "src", nil, nil},
		{"missing snapshot", "x", "src/nope", nil, errdefs.ErrNotFound},
		{"taken name", "fromvol", "src", nil, errdefs.ErrAlreadyExists},
		{"another size", "x", "src", map[string]string{"size": "4MiB"}, errdefs.ErrInvalid},
		{"bad name", "-x", "src", nil, errdefs.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := s.CopyVolume(ctx, "default", tt.dst, tt.source, "", tt.config)
			if !errors.Is(err, tt.want) {
				t.Fatalf("copy %s to %s: %v, want %v", tt.source, tt.dst, err, tt.want)
			}
			if err == nil {
				if v.Config[storage.KeyOwner] != "" {
					t.Errorf("copy without an owner: %v", v.Config)
				}
				if err := s.DeleteVolume(ctx, "default", tt.dst); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := s.Volume(ctx, "default", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused copy left volume x: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(s.Path("default", "src")), ".creating-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestNextSnapshotName(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	if _, err := s.CreateVolume(ctx, "default", "v", "", "", map[string]string{"size": "1MiB"}); err != nil {
		t.Fatal(err)
	}
	// Tried: none yet, then after snap0, after a gap (snap5), after names
	// that are not snapN.
	for _, tt := range []struct{ take, want string }{{"", "snap0"}, {"snap0", "snap1"}, {"snap5", "snap6"}, {"daily", "snap6"}, {"snapshot", "snap6"}} {
		if tt.take != "" {
			if _, err := s.CreateSnapshot(ctx, "default", "v", tt.take, ""); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.NextSnapshotName(ctx, "default", "v"); err != nil || got != tt.want {
			t.Fatalf("after %q: %q %v, want %q", tt.take, got, err, tt.want)
		}
	}
	if _, err := s.NextSnapshotName(ctx, "default", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a volume that does not exist: %v", err)
	}
}
