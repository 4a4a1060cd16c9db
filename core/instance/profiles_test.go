package instance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// lastSpec returns the spec the fake backend was last given for an
// instance (at create, then at every start).
func (e *env) lastSpec(uuid string) *contract.GuestSpec {
	e.t.Helper()
	e.be.mu.Lock()
	defer e.be.mu.Unlock()
	for _, g := range e.be.guests {
		if g.uuid == uuid {
			return g.spec
		}
	}
	e.t.Fatalf("no guest of uuid %s", uuid)
	return nil
}

func devsOf(spec *contract.GuestSpec) map[string]map[string]string {
	out := map[string]map[string]string{}
	for n, d := range spec.Devices {
		out[n] = map[string]string(d)
	}
	return out
}

func TestProfileDefaultMadeAtInit(t *testing.T) {
	e := newEnv(t)
	e.be.nic, e.be.disk = true, true
	ctx := context.Background()
	if err := e.m.Init(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := e.m.Profile(ctx, DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultProfileDevices(), p.Devices); diff != "" {
		t.Fatalf("default profile devices (-want +got):\n%s", diff)
	}
	// A second start (a new manager on the same store) keeps it as it is.
	if _, err := e.m.UpdateProfile(ctx, DefaultProfile, ProfilePut{Description: "mine", Devices: DefaultProfileDevices(), Config: map[string]string{"user.site": "a"}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	m2 := e.manager()
	if err := m2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := m2.Profile(ctx, DefaultProfile); p.Description != "mine" {
		t.Fatalf("the default profile was made again at restart: %+v", p)
	}
	e.m = m2
	inst := e.create("vm1", nil)
	if diff := cmp.Diff([]string{DefaultProfile}, inst.Profiles); diff != "" {
		t.Fatalf("profiles of a new instance (-want +got):\n%s", diff)
	}
	spec := e.lastSpec(inst.UUID)
	if diff := cmp.Diff(DefaultProfileDevices(), devsOf(spec)); diff != "" {
		t.Fatalf("devices given to the backend (-want +got):\n%s", diff)
	}
	if spec.Config["user.site"] != "a" {
		t.Fatalf("the default profile's config did not reach the backend: %v", spec.Config)
	}
	// The profile's NIC got its MAC address at create, as an own NIC does.
	if got := inst.Config[HwaddrKey("eth0")]; got != GeneratedHwaddr(inst.UUID, "eth0") {
		t.Fatalf("volatile.eth0.hwaddr = %q", got)
	}
	// --no-profiles: an empty list is none.
	bare, err := e.m.Create(ctx, CreateRequest{Name: "bare", Profiles: []string{}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if len(bare.Profiles) != 0 || len(e.lastSpec(bare.UUID).Devices) != 0 {
		t.Fatalf("an instance with no profiles got %v and devices %v", bare.Profiles, e.lastSpec(bare.UUID).Devices)
	}
}

func TestProfileLayering(t *testing.T) {
	e := newEnv(t)
	e.be.nic = true
	ctx := context.Background()
	nic := func(kv ...string) map[string]string {
		d := map[string]string{"type": "nic", "nictype": "user"}
		for i := 0; i < len(kv); i += 2 {
			d[kv[i]] = kv[i+1]
		}
		return d
	}
	if _, err := e.m.CreateProfile(ctx, "base", ProfilePut{
		Config:  map[string]string{"user.a": "base", "user.b": "base", "fake.cmd": "base"},
		Devices: map[string]map[string]string{"eth0": nic(), "eth1": nic("mtu", "1400")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.CreateProfile(ctx, "web", ProfilePut{
		Config:  map[string]string{"user.b": "web"},
		Devices: map[string]map[string]string{"eth1": nic("hostfwd", "tcp::8080-:80")},
	}); err != nil {
		t.Fatal(err)
	}
	inst, err := e.m.Create(ctx, CreateRequest{
		Name:     "vm1",
		Profiles: []string{"base", "web"},
		Config:   map[string]string{"user.a": "own"},
		Devices:  map[string]map[string]string{"eth0": nic("mtu", "9000")},
	}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	spec := e.lastSpec(inst.UUID)
	// Later wins for keys; a device of the same name is replaced whole
	// (eth1 of "web" has no mtu of "base").
	wantCfg := map[string]string{"user.a": "own", "user.b": "web", "fake.cmd": "base"}
	for k, v := range wantCfg {
		if spec.Config[k] != v {
			t.Errorf("config %s = %q, want %q", k, spec.Config[k], v)
		}
	}
	wantDevs := map[string]map[string]string{"eth0": nic("mtu", "9000"), "eth1": nic("hostfwd", "tcp::8080-:80")}
	if diff := cmp.Diff(wantDevs, devsOf(spec)); diff != "" {
		t.Fatalf("devices (-want +got):\n%s", diff)
	}
	// The instance's own config stays its own: the view's config has no
	// profile key, Expanded has all of them.
	if _, ok := inst.Config["user.b"]; ok {
		t.Fatalf("a profile key was copied into the instance's own config: %v", inst.Config)
	}
	cfg, devs, err := e.m.Expanded(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["user.b"] != "web" || cfg["user.a"] != "own" || devs["eth1"]["hostfwd"] == "" {
		t.Fatalf("Expanded = %v %v", cfg, devs)
	}

	// A change of a profile reaches the guest at its next start.
	if _, err := e.m.UpdateProfile(ctx, "web", ProfilePut{Config: map[string]string{"user.b": "web2"}, Devices: map[string]map[string]string{"eth1": nic("hostfwd", "tcp::8080-:80")}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, "vm1", adminCaller); err != nil {
		t.Fatal(err)
	}
	spec = e.lastSpec(inst.UUID)
	if spec.Config["user.b"] != "web2" {
		t.Fatalf("user.b at the next start = %q, want web2", spec.Config["user.b"])
	}
	if diff := cmp.Diff(nic("hostfwd", "tcp::8080-:80"), devsOf(spec)["eth1"]); diff != "" {
		t.Fatalf("eth1 at the next start (-want +got):\n%s", diff)
	}
	// web without devices: base's eth1 shows again.
	if _, err := e.m.UpdateProfile(ctx, "web", ProfilePut{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(ctx, "vm1", StopOptions{}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, "vm1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(nic("mtu", "1400"), devsOf(e.lastSpec(inst.UUID))["eth1"]); diff != "" {
		t.Fatalf("eth1 once web has none (-want +got):\n%s", diff)
	}
	if got := e.actions("vm1"); !strings.Contains(strings.Join(got, " "), "instance-updated") {
		t.Fatalf("no instance-updated for the profile change: %v", got)
	}
}

// A backend that cannot take a profile's device does without it: the
// default profile must never fail a launch (the sim backend has no NICs).
func TestProfileSkipsWhatTheBackendCannotTake(t *testing.T) {
	e := newEnv(t) // the fake backend announces neither nic.user.v1 nor disk.v1
	ctx := context.Background()
	if _, err := e.m.CreateProfile(ctx, "mixed", ProfilePut{Config: map[string]string{"qemu.memory": "1GiB", "user.x": "1"}}); err != nil {
		t.Fatal(err)
	}
	inst, err := e.m.Create(ctx, CreateRequest{Name: "vm1", Profiles: []string{DefaultProfile, "mixed"}, Start: true}, adminCaller)
	if err != nil {
		t.Fatalf("a launch on the default profile failed on a backend without NICs: %v", err)
	}
	spec := e.lastSpec(inst.UUID)
	if len(spec.Devices) != 0 {
		t.Fatalf("devices the backend cannot take were given: %v", spec.Devices)
	}
	if _, ok := spec.Config["qemu.memory"]; ok || spec.Config["user.x"] != "1" {
		t.Fatalf("config given: %v (want user.x, not another backend's qemu.memory)", spec.Config)
	}
	// The instance's own NIC is not left out: the backend says what it
	// cannot do, as before profiles.
	if _, err := e.m.Create(ctx, CreateRequest{Name: "vm2", Devices: map[string]map[string]string{"eth9": {"type": "nic", "nictype": "user"}}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if got := e.lastSpec(e.get("vm2").UUID).Devices; got["eth9"] == nil {
		t.Fatalf("the instance's own nic was left out: %v", got)
	}
}

func TestProfileDeleteAndRename(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.m.CreateProfile(ctx, "web", ProfilePut{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b1", "a1"} {
		if _, err := e.m.Create(ctx, CreateRequest{Name: n, Profiles: []string{DefaultProfile, "web"}}, adminCaller); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		op   func() error
		kind error
		msg  string
	}{
		{"delete in use", func() error { return e.m.DeleteProfile(ctx, "web") }, errdefs.ErrConflict, "used by instances a1, b1"},
		{"delete default", func() error { return e.m.DeleteProfile(ctx, DefaultProfile) }, errdefs.ErrForbidden, `the "default" profile cannot be deleted`},
		{"rename default", func() error { return e.m.RenameProfile(ctx, DefaultProfile, "x") }, errdefs.ErrForbidden, `the "default" profile cannot be renamed`},
		{"delete unknown", func() error { return e.m.DeleteProfile(ctx, "nope") }, errdefs.ErrNotFound, `profile "nope"`},
		{"rename unknown", func() error { return e.m.RenameProfile(ctx, "nope", "x") }, errdefs.ErrNotFound, `"nope"`},
		{"rename onto taken", func() error { return e.m.RenameProfile(ctx, "web", DefaultProfile) }, errdefs.ErrAlreadyExists, `"web"`},
		{"rename to bad name", func() error { return e.m.RenameProfile(ctx, "web", "a b") }, errdefs.ErrInvalid, `invalid profile name "a b"`},
		{"assign unknown", func() error { _, err := e.m.AssignProfiles(ctx, "a1", []string{"nope"}, adminCaller); return err }, errdefs.ErrNotFound, `profile "nope"`},
		{"assign twice", func() error {
			_, err := e.m.AssignProfiles(ctx, "a1", []string{"web", "web"}, adminCaller)
			return err
		}, errdefs.ErrInvalid, `profile "web" is named twice`},
		{"create with unknown", func() error {
			_, err := e.m.Create(ctx, CreateRequest{Name: "c1", Profiles: []string{"nope"}}, adminCaller)
			return err
		}, errdefs.ErrNotFound, `profile "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.kind, tt.msg)
			}
		})
	}
	if _, err := e.m.Get(ctx, "c1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a create with an unknown profile made the instance: %v", err)
	}

	// A rename follows into the instances, in memory and in the store.
	if err := e.m.RenameProfile(ctx, "web", "site"); err != nil {
		t.Fatal(err)
	}
	if got := e.get("a1").Profiles; !cmp.Equal(got, []string{DefaultProfile, "site"}) {
		t.Fatalf("a1's profiles after the rename: %v", got)
	}
	if _, err := e.m.UpdateConfig(ctx, "a1", map[string]string{"user.z": "1"}, nil, adminCaller); err != nil {
		t.Fatal(err) // a write of the cached record must keep the new name
	}
	m2 := e.manager()
	if inst, err := m2.Get(ctx, "a1"); err != nil || !cmp.Equal(inst.Profiles, []string{DefaultProfile, "site"}) {
		t.Fatalf("a1 after a restart: %v %v", inst, err)
	}
	p, err := e.m.Profile(ctx, "site")
	if err != nil || !cmp.Equal(p.UsedBy, []string{"a1", "b1"}) {
		t.Fatalf("site used by %v (%v)", p, err)
	}
	// Unassigned, it can go.
	for _, n := range []string{"a1", "b1"} {
		if _, err := e.m.AssignProfiles(ctx, n, []string{DefaultProfile}, adminCaller); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.DeleteProfile(ctx, "site"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Profile(ctx, "site"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted profile: %v", err)
	}
}

func TestProfileRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.m.CreateProfile(ctx, "taken", ProfilePut{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, profile string
		put           ProfilePut
		kind          error
		msg           string
	}{
		{"empty name", "", ProfilePut{}, errdefs.ErrInvalid, "the name is empty"},
		{"slash", "a/b", ProfilePut{}, errdefs.ErrInvalid, `character '/' at position 1`},
		{"dotdot", "..", ProfilePut{}, errdefs.ErrInvalid, `invalid profile name ".."`},
		{"taken", "taken", ProfilePut{}, errdefs.ErrAlreadyExists, `"taken"`},
		{"volatile key", "p", ProfilePut{Config: map[string]string{"volatile.eth0.hwaddr": "00:16:3e:00:00:01"}}, errdefs.ErrInvalid, "volatile keys belong to an instance"},
		{"unknown key", "p", ProfilePut{Config: map[string]string{"nodot": "1"}}, errdefs.ErrInvalid, `unknown configuration key "nodot"`},
		{"bad value", "p", ProfilePut{Config: map[string]string{KeyLimitsCPU: "0"}}, errdefs.ErrInvalid, "at least one CPU"},
		{"bad device", "p", ProfilePut{Devices: map[string]map[string]string{"eth0": {"type": "nic", "nictype": "wifi"}}}, errdefs.ErrInvalid, `unknown nictype "wifi"`},
		{"host path disk", "p", ProfilePut{Devices: map[string]map[string]string{"data": {"type": "disk", "source": "/etc", "path": "/mnt"}}}, errdefs.ErrInvalid, "only storage volumes may be attached"},
		{"device without type", "p", ProfilePut{Devices: map[string]map[string]string{"d": {"path": "/"}}}, errdefs.ErrInvalid, `invalid device "d": no type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.CreateProfile(ctx, tt.profile, tt.put)
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.kind, tt.msg)
			}
		})
	}
	list, err := e.m.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
	}
	if !cmp.Equal(names, []string{DefaultProfile, "taken"}) {
		t.Fatalf("profiles after refused creates: %v", names)
	}
}

// TestProfileRenameSeenByOtherMember: a rename made through one manager
// (one cluster member) while another holds the instance in its cache: the
// other's later write of the instance keeps the new name in the store, and
// its next start applies the renamed profile.
func TestProfileRenameSeenByOtherMember(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.m.CreateProfile(ctx, "web", ProfilePut{Config: map[string]string{"user.tier": "web"}}); err != nil {
		t.Fatal(err)
	}
	inst, err := e.m.Create(ctx, CreateRequest{Name: "vm1", Profiles: []string{"web"}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	other := e.manager()
	if _, err := other.Get(ctx, "vm1"); err != nil { // loads its cache now, before the rename
		t.Fatal(err)
	}
	if err := e.m.RenameProfile(ctx, "web", "site"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.UpdateConfig(ctx, "vm1", map[string]string{"user.z": "1"}, nil, adminCaller); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.GetInstance(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(rec.Profiles, []string{"site"}) {
		t.Fatalf("stored profiles after the other member's write: %v, want [site]", rec.Profiles)
	}
	if err := other.Start(ctx, "vm1", adminCaller); err != nil {
		t.Fatalf("start by the member whose cache predates the rename: %v", err)
	}
	if got := e.lastSpec(inst.UUID).Config["user.tier"]; got != "web" {
		t.Fatalf("user.tier at start = %q, want the renamed profile's web", got)
	}
}

// BenchmarkProfileStart measures a start (the backend's spec built, the
// profiles read from the store) with the default profile and with none.
func BenchmarkProfileStart(b *testing.B) {
	for _, bc := range []struct {
		name     string
		profiles []string
	}{{"default", nil}, {"none", []string{}}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b)
			ctx := context.Background()
			if _, err := e.m.Create(ctx, CreateRequest{Name: "vm1", Profiles: bc.profiles}, adminCaller); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := e.m.Start(ctx, "vm1", adminCaller); err != nil {
					b.Fatal(err)
				}
				if err := e.m.Stop(ctx, "vm1", StopOptions{}, adminCaller); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestProfileGuestView: what the guest sees through devlxd (GetByUUID) is
// the expanded config and devices, as LXD's devlxd: a cloud-init key kept
// in a profile reaches the guest, its own keys win, and a device its
// backend was not given is not shown to it either.
func TestProfileGuestView(t *testing.T) {
	e := newEnv(t)
	e.be.nic = true // no disk.v1: the default profile's root disk is left out
	ctx := context.Background()
	if _, err := e.m.CreateProfile(ctx, "ci", ProfilePut{Config: map[string]string{"cloud-init.user-data": "#cloud-config\n", "user.a": "profile"}}); err != nil {
		t.Fatal(err)
	}
	inst, err := e.m.Create(ctx, CreateRequest{Name: "vm1", Profiles: []string{DefaultProfile, "ci"}, Config: map[string]string{"user.a": "own"}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	guest, err := e.m.GetByUUID(ctx, inst.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if guest.Config["cloud-init.user-data"] != "#cloud-config\n" || guest.Config["user.a"] != "own" || guest.Config[KeyUUID] != inst.UUID {
		t.Fatalf("guest config %v", guest.Config)
	}
	if _, ok := guest.Devices["eth0"]; !ok {
		t.Fatalf("guest devices %v lack the default profile's eth0", guest.Devices)
	}
	if _, ok := guest.Devices["root"]; ok {
		t.Fatalf("guest devices %v show a root disk the backend was not given", guest.Devices)
	}
	// A change of the profile is seen at once; the API's view keeps the
	// instance's own config.
	if _, err := e.m.UpdateProfile(ctx, "ci", ProfilePut{Config: map[string]string{"user.b": "2"}}, adminCaller); err != nil {
		t.Fatal(err)
	}
	if guest, _ = e.m.GetByUUID(ctx, inst.UUID); guest.Config["user.b"] != "2" || guest.Config["cloud-init.user-data"] != "" {
		t.Fatalf("guest config after the change %v", guest.Config)
	}
	if own := e.get("vm1"); own.Config["user.b"] != "" || own.Devices["eth0"] != nil {
		t.Fatalf("the API's view shows profile keys: %v %v", own.Config, own.Devices)
	}
}
