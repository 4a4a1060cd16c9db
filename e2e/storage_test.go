package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/api"
)

// TestStorageCommands drives guestlink storage pool|volume against the
// real daemon: the dir pool, a volume's sparse file, snapshots, a disk
// device on a volume and the refusal to delete a volume in use.
func TestStorageCommands(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if pools := d.cli(ctx, "storage", "pool", "list"); !strings.Contains(pools, "default") || !strings.Contains(pools, "dir") {
		t.Fatalf("pool list:\n%s", pools)
	}
	d.cli(ctx, "storage", "volume", "create", "default", "vol1", "size=64MiB", "--description", "data")
	file := filepath.Join(d.stateDir, "storage-pools", "default", "custom", "vol1.raw")
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != 64<<20 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("volume file %s: %v %v", file, fi, err)
	}
	d.cli(ctx, "storage", "volume", "snapshot", "default", "vol1")
	d.cli(ctx, "storage", "volume", "snapshot", "default", "vol1", "before-upgrade")
	var shown struct {
		api.StorageVolume
		Snapshots []api.StorageVolume `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(d.cli(ctx, "--format", "json", "storage", "volume", "show", "default", "vol1")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Config["size"] != "64MiB" || shown.ContentType != "block" || len(shown.Snapshots) != 2 || shown.Snapshots[0].Name != "vol1/before-upgrade" || shown.Snapshots[1].Name != "vol1/snap0" {
		t.Fatalf("volume show: %+v", shown)
	}
	if list := d.cli(ctx, "storage", "volume", "list", "default"); !strings.Contains(list, "vol1") || strings.Contains(list, "snap0") {
		t.Fatalf("volume list:\n%s", list)
	}
	d.cli(ctx, "storage", "volume", "delete", "default", "vol1/snap0")

	// Attach it to a (stopped) instance; a volume in use cannot go.
	if _, err := d.client.Create(ctx, api.InstancesPost{Name: "st1", Backend: "sim"}); err != nil {
		t.Fatal(err)
	}
	d.cli(ctx, "config", "device", "add", "st1", "data", "disk", "pool=default", "source=vol1")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"storage", "volume", "delete", "default", "vol1"}, "Error: storage volume default/vol1 is used by instance st1 (remove the disk device first): conflict"},
		{[]string{"storage", "volume", "create", "default", "vol1"}, `Error: storage volume "vol1" already exists in pool default: already exists`},
		{[]string{"storage", "volume", "create", "fast", "v"}, `Error: storage pool "fast": not found`},
		{[]string{"storage", "volume", "create", "default", "v", "size=1000"}, `Error: invalid size "1000": a block volume's size is a multiple of 512 bytes: invalid argument`},
		{[]string{"config", "device", "add", "st1", "d2", "disk", "pool=default", "source=nope"}, `Error: updating devices of instance "st1": invalid device "d2": storage volume "nope" in pool "default": not found`},
	} {
		_, errOut, err := d.runCLI(ctx, tt.args...)
		if err == nil || strings.TrimSpace(errOut) != tt.want {
			t.Errorf("%s: err %v, stderr %q\nwant %q", strings.Join(tt.args, " "), err, errOut, tt.want)
		}
	}
	d.cli(ctx, "config", "device", "remove", "st1", "data")
	d.cli(ctx, "storage", "volume", "delete", "default", "vol1")
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("volume file left: %v", err)
	}
}
