package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
	"github.com/guestlink/guestlink/plugins/sdk/hostfwd/hostfwdtest"
)

// volumes is a VolumeChecker over a fixed set of pool/volume names.
type volumes map[string]bool

func (v volumes) CheckVolume(_ context.Context, pool, name string) error {
	if !v[pool+"/"+name] {
		return fmt.Errorf("storage volume %q in pool %q: %w", name, pool, errdefs.ErrNotFound)
	}
	return nil
}

func (v volumes) VolumePath(ctx context.Context, pool, name string) (string, error) {
	if err := v.CheckVolume(ctx, pool, name); err != nil {
		return "", err
	}
	return "/pools/" + pool + "/" + name + ".raw", nil
}

func TestValidateDevice(t *testing.T) {
	vc := volumes{"default/vol1": true}
	for _, tt := range []struct {
		name       string
		dev        map[string]string
		allowPaths bool
		want       error
		msg        string
	}{
		{"volume", map[string]string{"type": "disk", "pool": "default", "source": "vol1"}, false, nil, ""},
		{"volume readonly with path", map[string]string{"type": "disk", "pool": "default", "source": "vol1", "path": "/mnt/data", "readonly": "true"}, false, nil, ""},
		{"root disk", map[string]string{"type": "disk", "pool": "default", "path": "/"}, false, nil, ""},
		{"missing volume", map[string]string{"type": "disk", "pool": "default", "source": "nope"}, false, errdefs.ErrNotFound, `storage volume "nope" in pool "default"`},
		{"host path refused", map[string]string{"type": "disk", "source": "/etc"}, false, errdefs.ErrInvalid, `source "/etc" is a host path; only storage volumes may be attached`},
		{"host path allowed", map[string]string{"type": "disk", "source": "/srv/data"}, true, nil, ""},
		{"host path unclean", map[string]string{"type": "disk", "source": "/srv/../etc"}, true, errdefs.ErrInvalid, "not a clean absolute path"},
		{"volume without pool", map[string]string{"type": "disk", "source": "vol1"}, false, errdefs.ErrInvalid, "no pool is given"},
		{"disk without source", map[string]string{"type": "disk", "path": "/mnt"}, false, errdefs.ErrInvalid, "no source"},
		{"relative path", map[string]string{"type": "disk", "pool": "default", "source": "vol1", "path": "mnt"}, false, errdefs.ErrInvalid, `path "mnt" is not a clean absolute path`},
		{"readonly not bool", map[string]string{"type": "disk", "pool": "default", "source": "vol1", "readonly": "maybe"}, false, errdefs.ErrInvalid, "readonly"},
		{"unknown disk key", map[string]string{"type": "disk", "pool": "default", "source": "vol1", "sise": "1GiB"}, false, errdefs.ErrInvalid, `unknown key "sise" for a disk device`},
		{"root disk of an image, sized", map[string]string{"type": "disk", "path": "/", "size": "256MiB"}, false, nil, ""},
		{"size of a volume disk", map[string]string{"type": "disk", "pool": "default", "source": "vol1", "size": "1GiB"}, false, errdefs.ErrInvalid, "size is the root disk's (path /) only"},
		{"root size not a size", map[string]string{"type": "disk", "path": "/", "size": "big"}, false, errdefs.ErrInvalid, `size "big" is not a size`},
		{"root size zero", map[string]string{"type": "disk", "path": "/", "size": "0"}, false, errdefs.ErrInvalid, `size "0" is not a size`},
		{"user nic with port forwards", map[string]string{"type": "nic", "nictype": "user", "hostfwd": "tcp::2222-:22"}, false, nil, ""},
		{"nic", map[string]string{"type": "nic", "nictype": "bridged", "parent": "br0", "hwaddr": "00:16:3e:aa:bb:cc", "name": "eth1", "mtu": "1500"}, false, nil, ""},
		{"nic bad mac", map[string]string{"type": "nic", "hwaddr": "00:16:3e:aa:bb"}, false, errdefs.ErrInvalid, "is not a MAC address"},
		{"nic upper-case mac", map[string]string{"type": "nic", "hwaddr": "00:16:3E:AA:BB:CC"}, false, errdefs.ErrInvalid, "is not a MAC address"},
		{"nic multicast", map[string]string{"type": "nic", "hwaddr": "01:16:3e:aa:bb:cc"}, false, errdefs.ErrInvalid, "multicast"},
		{"nic bad nictype", map[string]string{"type": "nic", "nictype": "wifi"}, false, errdefs.ErrInvalid, `unknown nictype "wifi"`},
		{"nic long name", map[string]string{"type": "nic", "name": "averyveryverylongname"}, false, errdefs.ErrInvalid, "is not an interface name"},
		{"nic mtu", map[string]string{"type": "nic", "mtu": "10"}, false, errdefs.ErrInvalid, "mtu"},
		{"no type", map[string]string{"pool": "default"}, false, errdefs.ErrInvalid, "no type"},
		{"unsupported type", map[string]string{"type": "gpu"}, false, errdefs.ErrInvalid, `unsupported type "gpu"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDevice(context.Background(), "dev1", tt.dev, vc, tt.allowPaths)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	if err := ValidateDevice(context.Background(), "bad/name", map[string]string{"type": "nic"}, vc, false); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("device name with /: %v", err)
	}
}

// TestValidateDeviceHostfwd runs the shared table of refused hostfwd values
// (hostfwdtest; the QEMU backends' start-time check runs it too) through
// the add-time check: each is refused naming the device and the reason;
// hostfwd on a nic that is not nictype=user is refused too.
func TestValidateDeviceHostfwd(t *testing.T) {
	for _, tc := range hostfwdtest.Refused {
		t.Run(tc.Name, func(t *testing.T) {
			err := ValidateDevice(context.Background(), "eth0", map[string]string{"type": "nic", "nictype": "user", "hostfwd": tc.Value}, nil, false)
			if want := `invalid device "eth0": ` + tc.Reason; !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Errorf("hostfwd %q: %v, want ErrInvalid saying %q", tc.Value, err, want)
			}
		})
	}
	for _, v := range hostfwdtest.Accepted {
		if err := ValidateDevice(context.Background(), "eth0", map[string]string{"type": "nic", "nictype": "user", "hostfwd": v}, nil, false); err != nil {
			t.Errorf("hostfwd %q: %v", v, err)
		}
	}
	err := ValidateDevice(context.Background(), "eth0", map[string]string{"type": "nic", "nictype": "bridged", "parent": "br0", "hostfwd": "tcp::2222-:22"}, nil, false)
	if want := `invalid device "eth0": hostfwd is a key of a user nic (nictype=user) only, not of nictype "bridged": invalid argument`; err == nil || err.Error() != want {
		t.Errorf("hostfwd on a bridged nic: %v, want %q", err, want)
	}
}

func TestUpdateDevices(t *testing.T) {
	e := newEnv(t)
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be}, Bus: e.bus, Hooks: e.hooks,
		DefaultBackend: "fake", Volumes: volumes{"default/vol1": true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.Create(ctx, CreateRequest{Name: "d1", Devices: map[string]map[string]string{"eth0": {"type": "nic", "network": "br0"}}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	mac := inst.Config[HwaddrKey("eth0")]
	if mac != GeneratedHwaddr(inst.UUID, "eth0") {
		t.Fatalf("created NIC: volatile.eth0.hwaddr = %q, want %q", mac, GeneratedHwaddr(inst.UUID, "eth0"))
	}
	// Stopped: devices change without a backend call.
	disk := map[string]string{"type": "disk", "pool": "default", "source": "vol1"}
	got, err := m.UpdateDevices(ctx, "d1", DeviceUpdate{
		Put:    map[string]map[string]string{"data": disk, "eth1": {"type": "nic", "nictype": "bridged", "parent": "br0"}},
		Config: map[string]string{"volatile.data.devlxd.owner": "devlxd/csi"},
	}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices["data"]["source"] != "vol1" || got.Config["volatile.data.devlxd.owner"] != "devlxd/csi" || got.Config[HwaddrKey("eth1")] == "" {
		t.Fatalf("after add: devices %v config %v", got.Devices, got.Config)
	}
	// A MAC once stored does not change when the NIC is changed.
	mac1 := got.Config[HwaddrKey("eth1")]
	got, err = m.UpdateDevices(ctx, "d1", DeviceUpdate{Put: map[string]map[string]string{"eth1": {"type": "nic", "nictype": "bridged", "parent": "br1"}}}, adminCaller)
	if err != nil || got.Config[HwaddrKey("eth1")] != mac1 {
		t.Fatalf("after set: %v, hwaddr %q want %q", err, got.Config[HwaddrKey("eth1")], mac1)
	}
	for _, tt := range []struct {
		name string
		u    DeviceUpdate
		want error
		msg  string
	}{
		{"nothing", DeviceUpdate{}, errdefs.ErrInvalid, "no device to add"},
		{"remove missing", DeviceUpdate{Remove: []string{"nope"}}, errdefs.ErrNotFound, `device "nope"`},
		{"type change", DeviceUpdate{Put: map[string]map[string]string{"eth1": disk}}, errdefs.ErrInvalid, "cannot become a disk"},
		{"put and remove", DeviceUpdate{Put: map[string]map[string]string{"eth1": disk}, Remove: []string{"eth1"}}, errdefs.ErrInvalid, "named twice"},
		{"add existing", DeviceUpdate{Add: map[string]map[string]string{"data": disk}}, errdefs.ErrAlreadyExists, `device "data" exists (use set to change it)`},
		{"patch missing", DeviceUpdate{Patch: map[string]map[string]string{"nope": {"readonly": "true"}}}, errdefs.ErrNotFound, `device "nope"`},
		{"patch type", DeviceUpdate{Patch: map[string]map[string]string{"data": {"type": "nic"}}}, errdefs.ErrInvalid, "the type cannot change"},
		{"patch invalid", DeviceUpdate{Patch: map[string]map[string]string{"data": {"readonly": "maybe"}}}, errdefs.ErrInvalid, "readonly"},
		{"missing volume", DeviceUpdate{Put: map[string]map[string]string{"x": {"type": "disk", "pool": "default", "source": "vol2"}}}, errdefs.ErrNotFound, "vol2"},
		{"non-volatile config", DeviceUpdate{Put: map[string]map[string]string{"x": disk}, Config: map[string]string{"user.x": "1"}}, errdefs.ErrInvalid, "volatile"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := m.UpdateDevices(ctx, "d1", tt.u, adminCaller); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	got, err = m.UpdateDevices(ctx, "d1", DeviceUpdate{Patch: map[string]map[string]string{"data": {"readonly": "true", "path": "/mnt"}}}, adminCaller)
	if err != nil || got.Devices["data"]["readonly"] != "true" || got.Devices["data"]["source"] != "vol1" {
		t.Fatalf("patch: %v %v", err, got.Devices["data"])
	}
	// Running on a backend without hotplug.v1: refused, nothing changes.
	if err := m.Start(ctx, "d1", adminCaller); err != nil {
		t.Fatal(err)
	}
	_, err = m.UpdateDevices(ctx, "d1", DeviceUpdate{Remove: []string{"data"}}, adminCaller)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "backend fake cannot hot-plug devices; stop the instance first") {
		t.Fatalf("running without hotplug: %v", err)
	}
	if cur, _ := m.Get(ctx, "d1"); cur.Devices["data"] == nil {
		t.Fatal("a refused change removed the device")
	}
	if err := m.Stop(ctx, "d1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	// Removing drops the device's volatile keys.
	got, err = m.UpdateDevices(ctx, "d1", DeviceUpdate{Remove: []string{"data", "eth1"}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	for k := range got.Config {
		if strings.HasPrefix(k, "volatile.data.") || strings.HasPrefix(k, "volatile.eth1.") {
			t.Fatalf("removed device left %s", k)
		}
	}
	if _, ok := got.Devices["data"]; ok {
		t.Fatal("data still there")
	}
}

// hotplugBackend is a fakeBackend that announces hotplug.v1.
type hotplugBackend struct {
	*fakeBackend
	calls []string
	fail  error
}

func (h *hotplugBackend) Info(ctx context.Context) (*contract.Info, error) {
	info, err := h.fakeBackend.Info(ctx)
	if err == nil {
		info.Capabilities = append(info.Capabilities, CapHotplug)
	}
	return info, err
}

func (h *hotplugBackend) UpdateDevices(_ context.Context, _ contract.Handle, add map[string]contract.Device, remove []string) error {
	if h.fail != nil {
		return h.fail
	}
	for n, d := range add {
		h.calls = append(h.calls, "add "+n+" "+d[contract.KeyVolumePath])
	}
	for _, n := range remove {
		h.calls = append(h.calls, "remove "+n)
	}
	return nil
}

func TestUpdateDevicesHotplug(t *testing.T) {
	e := newEnv(t)
	hb := &hotplugBackend{fakeBackend: e.be}
	m, err := NewManager(Config{Store: e.store, Backends: anyBackends{"fake": hb}, Bus: e.bus, Hooks: e.hooks,
		DefaultBackend: "fake", Volumes: volumes{"default/vol1": true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{Name: "h1"}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "h1", adminCaller); err != nil {
		t.Fatal(err)
	}
	disk := map[string]string{"type": "disk", "pool": "default", "source": "vol1"}
	hb.fail = fmt.Errorf("QMP says no: %w", errdefs.ErrUnavailable)
	if _, err := m.UpdateDevices(ctx, "h1", DeviceUpdate{Put: map[string]map[string]string{"data": disk}}, adminCaller); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("failed hotplug: %v", err)
	}
	if cur, _ := m.Get(ctx, "h1"); len(cur.Devices) != 0 {
		t.Fatalf("a failed hotplug stored devices %v", cur.Devices)
	}
	hb.fail = nil
	if _, err := m.UpdateDevices(ctx, "h1", DeviceUpdate{Put: map[string]map[string]string{"data": disk}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdateDevices(ctx, "h1", DeviceUpdate{Remove: []string{"data"}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if strings.Join(hb.calls, ",") != "add data /pools/default/vol1.raw,remove data" {
		t.Fatalf("backend calls %v", hb.calls)
	}
}

// anyBackends is a BackendSource of any contract.Backend.
type anyBackends map[string]contract.Backend

func (s anyBackends) Backend(name string) (contract.Backend, error) {
	b, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("backend %q: %w", name, errdefs.ErrNotFound)
	}
	return b, nil
}

func TestHostPathDisks(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			e := newEnv(t)
			hb := &hotplugBackend{fakeBackend: e.be}
			m, err := NewManager(Config{Store: e.store, Backends: anyBackends{"fake": hb}, Bus: e.bus, Hooks: e.hooks,
				DefaultBackend: "fake", Volumes: volumes{}, AllowDiskPaths: allow})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := m.Create(ctx, CreateRequest{Name: "p1"}, adminCaller); err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx, "p1", adminCaller); err != nil {
				t.Fatal(err)
			}
			_, err = m.UpdateDevices(ctx, "p1", DeviceUpdate{Add: map[string]map[string]string{"h": {"type": "disk", "source": "/srv/disk.raw"}}}, adminCaller)
			if !allow {
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "is a host path") {
					t.Fatalf("host path not allowed: %v", err)
				}
				return
			}
			if err != nil || strings.Join(hb.calls, ",") != "add h /srv/disk.raw" {
				t.Fatalf("host path allowed: %v, calls %v", err, hb.calls)
			}
		})
	}
}
