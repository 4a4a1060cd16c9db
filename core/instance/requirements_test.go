package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// imagesWithProps is fakeImages whose images carry properties.
type imagesWithProps struct {
	fakeImages
	props map[string]string // of every image
}

func (f imagesWithProps) Properties(ctx context.Context, fp string) (map[string]string, error) {
	if _, err := f.fakeImages.Properties(ctx, fp); err != nil {
		return nil, err
	}
	return f.props, nil
}

// TestApplyImageRequirements: a guest of an image with requirements.memory
// gets at least that much: unset memory is raised to it (limits.memory,
// said), a backend key or limits.memory below it is refused naming the
// key, the figures and the fix; enough memory, a percentage, an image
// without the property or with an unreadable one change nothing.
func TestApplyImageRequirements(t *testing.T) {
	req := map[string]string{ImagePropMinMemory: "1GiB"}
	for _, tt := range []struct {
		name       string
		cfg        map[string]string
		props      map[string]string
		wantCfg    string // limits.memory after, "" for unset
		wantRaised string // substring of the note, "" for none
		wantErr    string // substring of the error, "" for none
	}{
		{"unset: raised", map[string]string{}, req, "1GiB", `limits.memory=1GiB: image "debian-12" needs at least 1GiB`, ""},
		{"backend key below", map[string]string{"qemu.memory": "256"}, req, "", "",
			`image "debian-12" needs at least 1GiB of memory (its requirements.memory), and qemu.memory=256 is 256MiB: raise it (-c qemu.memory=1GiB)`},
		{"backend key in GiB below", map[string]string{"qemu.memory": "512M"}, map[string]string{ImagePropMinMemory: "2GiB"}, "", "", "qemu.memory=512M is 512MiB"},
		{"backend key enough", map[string]string{"qemu.memory": "1GiB"}, req, "", "", ""},
		{"backend key beats limits.memory", map[string]string{"qemu.memory": "2048", KeyLimitsMemory: "128MiB"}, req, "128MiB", "", ""},
		{"limits.memory below", map[string]string{KeyLimitsMemory: "512MiB"}, req, "512MiB", "", "limits.memory=512MiB is 512MiB: raise it (-c limits.memory=1GiB)"},
		{"limits.memory in bytes, enough", map[string]string{KeyLimitsMemory: "1073741824"}, req, "1073741824", "", ""},
		{"limits.memory in decimal GB, below", map[string]string{KeyLimitsMemory: "1GB"}, req, "1GB", "", "limits.memory=1GB is 1000000000B"},
		{"percentage: not judged", map[string]string{KeyLimitsMemory: "50%"}, req, "50%", "", ""},
		{"no requirement", map[string]string{}, nil, "", "", ""},
		{"unreadable requirement", map[string]string{}, map[string]string{ImagePropMinMemory: "lots"}, "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raised, err := applyImageRequirements(tt.cfg, "qemu", "debian-12", tt.props)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalid)) {
				t.Fatalf("err %v, want ErrInvalid saying %q", err, tt.wantErr)
			}
			if tt.wantRaised == "" && raised != "" || !strings.Contains(raised, tt.wantRaised) {
				t.Errorf("raised %q, want %q", raised, tt.wantRaised)
			}
			if got := tt.cfg[KeyLimitsMemory]; got != tt.wantCfg {
				t.Errorf("limits.memory %q, want %q", got, tt.wantCfg)
			}
		})
	}
}

// TestCreateHoldsImageMinimum: through Create, a guest of an image that
// needs 1GiB launched with less is refused before anything is made (no
// record, no backend guest); one launched without a memory key is made
// with limits.memory=1GiB.
func TestCreateHoldsImageMinimum(t *testing.T) {
	deb := &contract.Image{Fingerprint: strings.Repeat("cd", 32), Path: "/s/images/cd", Format: "raw"}
	e := newEnv(t)
	e.images = imagesWithProps{fakeImages{"debian-12": deb}, map[string]string{ImagePropMinMemory: "1GiB"}}
	e.be.disk = true
	e.m = e.manager()
	_, err := e.m.Create(bg, CreateRequest{Name: "small", Image: "debian-12", Config: map[string]string{KeyLimitsMemory: "256MiB"}}, adminCaller)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "needs at least 1GiB") {
		t.Fatalf("Create below the minimum = %v, want ErrInvalid naming the minimum", err)
	}
	if _, err := e.m.Get(bg, "small"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused create left an instance: %v", err)
	}
	e.be.mu.Lock()
	n := len(e.be.guests)
	e.be.mu.Unlock()
	if n != 0 {
		t.Fatalf("a refused create reached the backend: %d guests", n)
	}
	inst, err := e.m.Create(bg, CreateRequest{Name: "vm1", Image: "debian-12"}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Config[KeyLimitsMemory] != "1GiB" {
		t.Fatalf("limits.memory %q, want the image's 1GiB", inst.Config[KeyLimitsMemory])
	}
}

// TestApplyDiskRequirement: a guest of an image with requirements.disk
// (2GiB) whose root disk is smaller is refused, naming the device, both
// sizes and the fix; one whose root disk has no size (the profile's), or
// that has no root disk, gets the instance's own root device with the
// minimum (the profile's other keys kept); at or above the minimum, or
// without the property, nothing changes.
func TestApplyDiskRequirement(t *testing.T) {
	profRoot := map[string]string{"type": "disk", "path": "/", "pool": "default"}
	nic := map[string]string{"type": "nic", "nictype": "user"}
	req := map[string]string{ImagePropMinDisk: "2GiB"}
	for _, tt := range []struct {
		name      string
		eff, own  map[string]map[string]string
		props     map[string]string
		wantErr   string
		wantOwn   map[string]map[string]string
		wantRaise string
	}{
		{"below, own device", map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "1GiB"}}, map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "1GiB"}}, req,
			`image "debian-12" needs a root disk of at least 2GiB (its requirements.disk), and device "root" size=1GiB is 1GiB: raise it (size=2GiB) or leave it unset`, nil, ""},
		{"below, in bytes", map[string]map[string]string{"rootfs": {"type": "disk", "path": "/", "size": "1500000256"}}, nil, req,
			`device "rootfs" size=1500000256 is 1464844KiB`, nil, ""},
		{"at the minimum", map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "2048MiB"}}, nil, req, "", nil, ""},
		{"above", map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "10GiB"}}, nil, req, "", nil, ""},
		{"profile's root without a size", map[string]map[string]string{"root": profRoot, "eth0": nic}, map[string]map[string]string{"data": {"type": "disk", "path": "/srv", "source": "v", "pool": "p"}}, req, "",
			map[string]map[string]string{"data": {"type": "disk", "path": "/srv", "source": "v", "pool": "p"}, "root": {"type": "disk", "path": "/", "pool": "default", "size": "2GiB"}},
			`device "root" size=2GiB: image "debian-12" needs a root disk of at least 2GiB (its requirements.disk)`},
		{"no root disk", map[string]map[string]string{"eth0": nic}, nil, req, "",
			map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "2GiB"}}, `device "root" size=2GiB`},
		{"no requirement", map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "1GiB"}}, nil, map[string]string{}, "", nil, ""},
		{"unreadable requirement", map[string]map[string]string{"root": profRoot}, nil, map[string]string{ImagePropMinDisk: "big"}, "", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			devs, raised, err := applyDiskRequirement(tt.eff, tt.own, "debian-12", tt.props)
			if tt.wantErr != "" {
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want ErrInvalid with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(raised, tt.wantRaise) || (tt.wantRaise == "") != (raised == "") {
				t.Errorf("raised %q, want %q", raised, tt.wantRaise)
			}
			want := tt.wantOwn
			if want == nil {
				want = tt.own
			}
			if fmt.Sprint(devs) != fmt.Sprint(want) {
				t.Errorf("devices %v, want %v", devs, want)
			}
		})
	}
	// The caller's map is not changed by a raise.
	own := map[string]map[string]string{}
	if _, _, _ = applyDiskRequirement(map[string]map[string]string{}, own, "x", req); len(own) != 0 {
		t.Errorf("the instance's own devices were changed in place: %v", own)
	}
}

// TestCreateHoldsImageDisk: through Create, a guest of an image that
// needs a 2GiB root disk launched with a 1GiB one is refused before
// anything is made; one launched on the default profile (its root disk
// without a size) is made with its own root device of 2GiB, which the
// backend is given.
func TestCreateHoldsImageDisk(t *testing.T) {
	deb := &contract.Image{Fingerprint: strings.Repeat("cd", 32), Path: "/s/images/cd", Format: "raw"}
	e := newEnv(t)
	e.images = imagesWithProps{fakeImages{"debian-12": deb}, map[string]string{ImagePropMinDisk: "2GiB"}}
	e.be.disk = true
	e.m = e.manager()
	_, err := e.m.Create(bg, CreateRequest{Name: "small", Image: "debian-12", Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "1GiB"}}}, adminCaller)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `device "root" size=1GiB is 1GiB`) {
		t.Fatalf("Create below the minimum = %v, want ErrInvalid naming both sizes", err)
	}
	e.be.mu.Lock()
	n := len(e.be.guests)
	e.be.mu.Unlock()
	if n != 0 {
		t.Fatalf("a refused create reached the backend: %d guests", n)
	}
	inst, err := e.m.Create(bg, CreateRequest{Name: "vm1", Image: "debian-12"}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if root := inst.Devices["root"]; root["size"] != "2GiB" || root["path"] != "/" {
		t.Fatalf("devices %v, want the root disk raised to 2GiB", inst.Devices)
	}
}
