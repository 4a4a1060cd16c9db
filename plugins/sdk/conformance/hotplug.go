package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// testHotplug checks the hot-plug contract (hotplug.v1): a plugin without
// the capability answers ErrNotSupported (the SDK's default); one with it
// refuses a stopped guest (ErrConflict), adds a disk of a raw file to a
// running guest and removes it, and answers ErrNotFound for a device the
// guest does not have.
func (s *suite) testHotplug(t *testing.T) {
	hp, ok := s.b.(sdk.DeviceHotplugger)
	if !ok {
		t.Fatal("the SDK client does not implement sdk.DeviceHotplugger")
	}
	g := s.create(t, s.b, nil)
	ctx, cancel := s.ctx()
	defer cancel()
	if !s.info.Has(sdk.CapHotplug) {
		if err := hp.UpdateDevices(ctx, g.h, nil, []string{"disk1"}); !errors.Is(err, sdk.ErrNotSupported) {
			t.Fatalf("UpdateDevices without capability %q = %v, want ErrNotSupported", sdk.CapHotplug, err)
		}
		return
	}
	file := filepath.Join(t.TempDir(), "disk1.raw")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 1<<20); err != nil {
		t.Fatal(err)
	}
	disk := map[string]sdk.Device{"disk1": {"type": "disk", "pool": "default", "source": "disk1", sdk.KeyVolumePath: file}}
	if err := hp.UpdateDevices(ctx, g.h, disk, nil); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("UpdateDevices on a stopped guest = %v, want ErrConflict", err)
	}
	s.start(t, s.b, g)
	if err := hp.UpdateDevices(ctx, g.h, disk, nil); err != nil {
		t.Fatalf("adding a disk to a running guest: %v", err)
	}
	if err := hp.UpdateDevices(ctx, g.h, nil, []string{"disk1"}); err != nil {
		t.Fatalf("removing the disk: %v", err)
	}
	if err := hp.UpdateDevices(ctx, g.h, nil, []string{"nope"}); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("removing a device the guest lacks = %v, want ErrNotFound", err)
	}
	s.wantStatus(t, s.b, g, sdk.StatusRunning)
}
