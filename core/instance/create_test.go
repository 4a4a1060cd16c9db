package instance

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
)

func TestCreateRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.create("taken", nil)
	baseline := e.be.count()
	long := "a" + strings.Repeat("b", 63)
	tests := []struct {
		name    string
		req     CreateRequest
		kind    error
		message string
	}{
		{"empty name", CreateRequest{}, errdefs.ErrInvalid, "the name is empty"},
		{"too long", CreateRequest{Name: long}, errdefs.ErrInvalid, "longer than 63 characters"},
		{"leading digit", CreateRequest{Name: "1web"}, errdefs.ErrInvalid, "must not start with a digit"},
		{"leading hyphen", CreateRequest{Name: "-web"}, errdefs.ErrInvalid, "must not start with a hyphen"},
		{"trailing hyphen", CreateRequest{Name: "web-"}, errdefs.ErrInvalid, "must not end with a hyphen"},
		{"underscore", CreateRequest{Name: "web_1"}, errdefs.ErrInvalid, `character '_' at position 3`},
		{"dot", CreateRequest{Name: "web.1"}, errdefs.ErrInvalid, "not a letter, digit or hyphen"},
		{"unicode", CreateRequest{Name: "wéb"}, errdefs.ErrInvalid, "not a letter, digit or hyphen"},
		{"slash", CreateRequest{Name: "a/b"}, errdefs.ErrInvalid, "not a letter, digit or hyphen"},
		{"duplicate", CreateRequest{Name: "taken"}, errdefs.ErrAlreadyExists, "exists"},
		{"unknown backend", CreateRequest{Name: "x", Backend: "qemu"}, errdefs.ErrNotFound, "available: fake"},
		{"unknown key", CreateRequest{Name: "x", Config: map[string]string{"x": "1"}}, errdefs.ErrInvalid, `unknown configuration key "x"`},
		// Devices get the device routes' checks at creation too.
		{"device without type", CreateRequest{Name: "x", Devices: map[string]map[string]string{"d": {"pool": "default"}}}, errdefs.ErrInvalid, `invalid device "d": no type`},
		{"unknown device key", CreateRequest{Name: "x", Devices: map[string]map[string]string{"eth0": {"type": "nic", "nictype": "user", "hostfw": "tcp::2222-:22"}}}, errdefs.ErrInvalid, `unknown key "hostfw" for a nic device`},
		{"bad mac", CreateRequest{Name: "x", Devices: map[string]map[string]string{"eth0": {"type": "nic", "hwaddr": "00:16:3e:zz:00:01"}}}, errdefs.ErrInvalid, "not a MAC address"},
		{"host path disk", CreateRequest{Name: "x", Devices: map[string]map[string]string{"data": {"type": "disk", "source": "/etc", "path": "/mnt"}}}, errdefs.ErrInvalid, "only storage volumes may be attached"},
		{"bad device name", CreateRequest{Name: "x", Devices: map[string]map[string]string{"a/b": {"type": "nic"}}}, errdefs.ErrInvalid, "a/b"},
		{"unknown namespace", CreateRequest{Name: "x", Config: map[string]string{"boot.autostart": "1"}}, errdefs.ErrInvalid, `unknown configuration key "boot.autostart"`},
		{"empty user key", CreateRequest{Name: "x", Config: map[string]string{"user.": "1"}}, errdefs.ErrInvalid, "nothing after its prefix"},
		{"devlxd not bool", CreateRequest{Name: "x", Config: map[string]string{"security.devlxd": "maybe"}}, errdefs.ErrInvalid, "not a boolean"},
		{"devlxd images not bool", CreateRequest{Name: "x", Config: map[string]string{"security.devlxd.images": "2"}}, errdefs.ErrInvalid, "not a boolean"},
		{"undocumented volatile", CreateRequest{Name: "x", Config: map[string]string{"volatile.foo": "1"}}, errdefs.ErrInvalid, `unknown configuration key "volatile.foo"`},
		{"ready is the daemon's", CreateRequest{Name: "x", Config: map[string]string{KeyReady: "true"}}, errdefs.ErrInvalid, "managed by the daemon"},
		{"bad uuid", CreateRequest{Name: "x", Config: map[string]string{KeyUUID: "nope"}}, errdefs.ErrInvalid, "not a lowercase UUID"},
		{"bad vsock id", CreateRequest{Name: "x", Config: map[string]string{KeyVsockID: "2"}}, errdefs.ErrInvalid, "guest CID"},
		{"zero cpus", CreateRequest{Name: "x", Config: map[string]string{KeyLimitsCPU: "0"}}, errdefs.ErrInvalid, "at least one CPU"},
		{"bad cpu set", CreateRequest{Name: "x", Config: map[string]string{KeyLimitsCPU: "1-"}}, errdefs.ErrInvalid, "CPU set"},
		{"bad memory", CreateRequest{Name: "x", Config: map[string]string{KeyLimitsMemory: "lots"}}, errdefs.ErrInvalid, "not a size"},
		{"bad memory unit", CreateRequest{Name: "x", Config: map[string]string{KeyLimitsMemory: "1XB"}}, errdefs.ErrInvalid, "not a size"},
		{"memory percent", CreateRequest{Name: "x", Config: map[string]string{KeyLimitsMemory: "101%"}}, errdefs.ErrInvalid, "between 1% and 100%"},
		{"backend key", CreateRequest{Name: "x", Config: map[string]string{"fake.nope": "1"}}, errdefs.ErrInvalid, `unknown configuration key "fake.nope"`},
		{"device without type", CreateRequest{Name: "x", Devices: map[string]map[string]string{"eth0": {"network": "br0"}}}, errdefs.ErrInvalid, `device "eth0": no type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Create(bg, tt.req, adminCaller)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("Create: %v, want %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not say %q", err, tt.message)
			}
			list, err := e.m.List(bg, ListFilter{})
			if err != nil || len(list) != 1 {
				t.Fatalf("after a bad Create: %d instances, %v", len(list), err)
			}
			if n := e.be.count(); n != baseline {
				t.Errorf("backend holds %d guests, want %d", n, baseline)
			}
			if got := e.actions(tt.req.Name); tt.req.Name != "taken" && len(got) != 0 {
				t.Errorf("events for %q: %v", tt.req.Name, got)
			}
		})
	}
	t.Run("duplicate uuid", func(t *testing.T) {
		taken := e.get("taken")
		_, err := e.m.Create(bg, CreateRequest{Name: "other", Config: map[string]string{KeyUUID: taken.UUID}}, adminCaller)
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("Create: %v, want ErrAlreadyExists", err)
		}
	})
}

func TestCreateAcceptsKnownKeys(t *testing.T) {
	e := newEnv(t)
	good := []map[string]string{
		{"user.foo": "bar", "user.user-data": "#cloud-config"},
		{"cloud-init.user-data": "#cloud-config", "cloud-init.vendor-data": "x", "cloud-init.network-config": "y", "cloud-init.instance-id": "z"},
		{KeySecurityDevlxd: "false", KeySecurityDevlxdImgs: "true"},
		{KeySecurityDevlxd: "0", KeySecurityDevlxdImgs: "on"},
		{KeyLimitsCPU: "2", KeyLimitsMemory: "512MiB"},
		{KeyLimitsCPU: "0-3,6", KeyLimitsMemory: "50%"},
		{KeyLimitsMemory: "1073741824"},
		{KeyCloudInitID: "iid-1", KeyVsockID: "42"},
		{KeyUUID: "0b7e3a4c-1d2f-4e5a-8b9c-0d1e2f3a4b5c"},
		{"fake.cmd": "/bin/true", "user.empty": ""},
	}
	for i, cfg := range good {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			inst, err := e.m.Create(bg, CreateRequest{Name: fmt.Sprintf("g%d", i), Config: cfg}, adminCaller)
			if err != nil {
				t.Fatalf("Create(%v): %v", cfg, err)
			}
			for k, v := range cfg {
				if v != "" && inst.Config[k] != v {
					t.Errorf("config %s = %q, want %q", k, inst.Config[k], v)
				}
			}
			if _, ok := inst.Config["user.empty"]; ok {
				t.Error("an empty value was stored")
			}
		})
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCreate(t *testing.T) {
	e := newEnv(t)
	inst, err := e.m.Create(bg, CreateRequest{Name: "web1", Config: map[string]string{"user.a": "b"},
		Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/", "size": "1GiB"}}}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if !uuidV4.MatchString(inst.UUID) || inst.Config[KeyUUID] != inst.UUID {
		t.Errorf("uuid %q, config %q", inst.UUID, inst.Config[KeyUUID])
	}
	if inst.Status != "Stopped" || inst.StatusCode != 102 || inst.Backend != "fake" || inst.Boot != 0 {
		t.Errorf("view %+v", inst)
	}
	if inst.Devices["root"]["size"] != "1GiB" {
		t.Errorf("devices %v", inst.Devices)
	}
	if _, ok := inst.Config[KeyReady]; ok {
		t.Error("a new instance has a ready flag")
	}
	byUUID, err := e.m.GetByUUID(bg, inst.UUID)
	if err != nil || byUUID.Name != "web1" {
		t.Fatalf("GetByUUID: %v, %v", byUUID, err)
	}
	// Views are copies.
	inst.Config["user.a"] = "changed"
	if e.get("web1").Config["user.a"] != "b" {
		t.Error("changing a view changed the instance")
	}
	stored, err := e.store.GetInstance(bg, "web1")
	if err != nil || stored.UUID != inst.UUID || len(stored.Handle) == 0 {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	if got := e.actions("web1"); !slices.Equal(got, []string{events.InstanceCreated}) {
		t.Errorf("events %v", got)
	}
	if got := e.timeline("web1"); !slices.Equal(got, []string{"state ->stopped api: unix root"}) {
		t.Errorf("timeline %v", got)
	}
	if _, err := e.m.Get(bg, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(nope): %v", err)
	}
	if _, err := e.m.GetByUUID(bg, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetByUUID(nope): %v", err)
	}
	if _, err := e.m.Timeline(bg, "nope", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Timeline(nope): %v", err)
	}
}

func TestCreateAndStart(t *testing.T) {
	e := newEnv(t)
	inst, err := e.m.Create(bg, CreateRequest{Name: "web1", Start: true}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Status != "Running" {
		t.Fatalf("status %s", inst.Status)
	}
	if got := e.actions("web1"); !slices.Equal(got, []string{events.InstanceCreated, events.InstanceStarted}) {
		t.Errorf("events %v", got)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(bg, "web1", false, adminCaller); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("deleting a running instance: %v", err)
	}
	if got := e.get("web1"); got.Status != "Running" || e.be.count() != 1 {
		t.Fatalf("a refused delete changed something: %s, %d guests", got.Status, e.be.count())
	}
	if err := e.m.Delete(bg, "web1", true, adminCaller); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(bg, "web1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after delete: %v", err)
	}
	if _, err := e.store.GetInstance(bg, "web1"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("stored after delete: %v", err)
	}
	if e.be.count() != 0 {
		t.Errorf("backend still holds %d guests", e.be.count())
	}
	if got := e.actions("web1"); got[len(got)-1] != events.InstanceDeleted {
		t.Errorf("events %v", got)
	}
	if h := e.hooks.list(); len(h) < 2 || h[len(h)-2] != "stopped web1" || h[len(h)-1] != "deleted web1" {
		t.Errorf("hooks %v, want ... stopped web1, deleted web1", h)
	}
	// The name is free again; a stopped instance is deleted without force.
	e.create("web1", nil)
	if err := e.m.Delete(bg, "web1", false, adminCaller); err != nil {
		t.Fatal(err)
	}
	// A stopped instance is only deleted: no GuestStopped before it.
	if h := e.hooks.list(); h[len(h)-1] != "deleted web1" || h[len(h)-2] != "deleted web1" {
		t.Errorf("deleting a stopped instance: hooks %v, want deleted twice in a row", h)
	}
}

func TestUpdateConfig(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", map[string]string{"user.a": "1", "user.b": "2"})
	bad := []struct {
		name  string
		set   map[string]string
		unset []string
	}{
		{"unknown key", map[string]string{"user.c": "3", "nope": "x"}, nil},
		{"bad bool", map[string]string{"user.c": "3", KeySecurityDevlxd: "yes please"}, nil},
		{"change uuid", map[string]string{KeyUUID: "0b7e3a4c-1d2f-4e5a-8b9c-0d1e2f3a4b5c"}, nil},
		{"unset uuid", nil, []string{KeyUUID}},
		{"unset unknown", nil, []string{"nope"}},
		{"set and unset", map[string]string{"user.a": "9"}, []string{"user.a"}},
		{"ready", map[string]string{KeyReady: "true"}, nil},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.UpdateConfig(bg, "web1", tt.set, tt.unset, adminCaller)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("UpdateConfig: %v, want ErrInvalid", err)
			}
			if got := e.get("web1").Config; !cmp.Equal(got, inst.Config) {
				t.Errorf("config changed: %v", got)
			}
		})
	}
	if _, err := e.m.UpdateConfig(bg, "nope", map[string]string{"user.a": "1"}, nil, adminCaller); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing instance: %v", err)
	}
	if err := e.m.Start(bg, "web1", adminCaller); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.a": "10", "user.c": "3", "fake.cmd": "x", "user.b": ""}, []string{"user.zz"}, adminCaller)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config["user.a"] != "10" || got.Config["user.c"] != "3" || got.Config["fake.cmd"] != "x" {
		t.Errorf("config %v", got.Config)
	}
	if _, ok := got.Config["user.b"]; ok {
		t.Error("user.b not unset")
	}
	stored, _ := e.store.GetInstance(bg, "web1")
	if stored.Config["user.a"] != "10" {
		t.Errorf("stored config %v", stored.Config)
	}
	want := []ConfigChange{{Key: "fake.cmd", Value: "x"}, {Key: "user.a", OldValue: "1", Value: "10"},
		{Key: "user.b", OldValue: "2"}, {Key: "user.c", Value: "3"}}
	if len(e.hooks.chg) != 1 || !cmp.Equal(e.hooks.chg[0], want) {
		t.Errorf("ConfigChanged %v, want %v", e.hooks.chg, want)
	}
	// No change: no event, no hook.
	n := len(e.actions("web1"))
	if _, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.a": "10"}, nil, adminCaller); err != nil {
		t.Fatal(err)
	}
	if len(e.actions("web1")) != n || len(e.hooks.chg) != 1 {
		t.Error("a no-op update was announced")
	}
	if acts := e.actions("web1"); acts[len(acts)-1] != events.InstanceUpdated {
		t.Errorf("events %v", acts)
	}
}

// TestUpdateConfigRenewsCloudInitID checks LXD's rule: a change of cloud-init
// seed data (any cloud-init.* key, user.user-data/vendor-data/network-config)
// gives a new instance-id, other changes keep it, and an update that sets
// the instance-id itself wins.
func TestUpdateConfigRenewsCloudInitID(t *testing.T) {
	e := newEnv(t)
	e.create("ci", map[string]string{"user.a": "1", KeyCloudInitID: "iid-0"})
	tests := []struct {
		name  string
		set   map[string]string
		unset []string
		renew bool
	}{
		{"user key", map[string]string{"user.a": "2"}, nil, false},
		{"meta-data", map[string]string{"user.meta-data": "x: 1\n"}, nil, false},
		{"limits", map[string]string{KeyLimitsCPU: "2"}, nil, false},
		{"user-data", map[string]string{"cloud-init.user-data": "#cloud-config\n"}, nil, true},
		{"same user-data again", map[string]string{"cloud-init.user-data": "#cloud-config\n"}, nil, false},
		{"ssh key", map[string]string{"cloud-init.ssh-keys.k": "root:ssh-rsa AAA"}, nil, true},
		{"ssh key removed", nil, []string{"cloud-init.ssh-keys.k"}, true},
		{"old vendor-data", map[string]string{"user.vendor-data": "#cloud-config\n"}, nil, true},
		{"network-config", map[string]string{"cloud-init.network-config": "version: 2\n"}, nil, true},
		{"explicit id wins", map[string]string{"cloud-init.user-data": "#cloud-config\na: 1\n", KeyCloudInitID: "iid-mine"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.get("ci").Config[KeyCloudInitID]
			got, err := e.m.UpdateConfig(bg, "ci", tt.set, tt.unset, adminCaller)
			if err != nil {
				t.Fatal(err)
			}
			after := got.Config[KeyCloudInitID]
			if want, ok := tt.set[KeyCloudInitID]; ok && after != want {
				t.Fatalf("instance-id %q, want the one set %q", after, want)
			}
			if renewed := after != before; renewed != tt.renew {
				t.Fatalf("instance-id %q -> %q: renewed %v, want %v", before, after, renewed, tt.renew)
			}
			if stored, _ := e.store.GetInstance(bg, "ci"); stored.Config[KeyCloudInitID] != after {
				t.Fatalf("stored instance-id %q, want %q", stored.Config[KeyCloudInitID], after)
			}
		})
	}
}
