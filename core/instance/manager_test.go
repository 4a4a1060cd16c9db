package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

func TestNewManagerNeedsItsParts(t *testing.T) {
	e := newEnv(t)
	for name, cfg := range map[string]Config{
		"no store":    {Backends: fakeBackends{}, Bus: e.bus},
		"no backends": {Store: e.store, Bus: e.bus},
		"no bus":      {Store: e.store, Backends: fakeBackends{}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewManager(cfg); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("NewManager: %v, want ErrInvalid", err)
			}
		})
	}
}

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
			_, err := e.m.Create(bg, tt.req, api)
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
		_, err := e.m.Create(bg, CreateRequest{Name: "other", Config: map[string]string{KeyUUID: taken.UUID}}, api)
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
			inst, err := e.m.Create(bg, CreateRequest{Name: fmt.Sprintf("g%d", i), Config: cfg}, api)
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
		Devices: map[string]map[string]string{"root": {"type": "disk", "size": "1GiB"}}}, api)
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
	inst, err := e.m.Create(bg, CreateRequest{Name: "web1", Start: true}, api)
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

func TestStartStop(t *testing.T) {
	e := newEnv(t)
	e.create("web1", map[string]string{"user.x": "y"})
	if err := e.m.Stop(bg, "web1", StopOptions{}, api); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("stopping a stopped instance: %v", err)
	}
	before := time.Now().UTC()
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	inst := e.get("web1")
	if inst.Status != "Running" || inst.StatusCode != 103 || inst.Boot != 1 {
		t.Errorf("after start: %s %d boot %d", inst.Status, inst.StatusCode, inst.Boot)
	}
	if inst.StartedAt == nil || inst.StartedAt.Before(before.Add(-time.Second)) {
		t.Errorf("started_at %v", inst.StartedAt)
	}
	if inst.Config[KeyReady] != "false" || inst.Ready() || inst.ReadyAt != nil {
		t.Errorf("a fresh boot is Ready: %q %v", inst.Config[KeyReady], inst.ReadyAt)
	}
	if inst.Link != "hybrid" || inst.DevlxdSocket != "/run/web1/sock" || inst.Details["devlxd_socket"] == "" {
		t.Errorf("link %q socket %q details %v", inst.Link, inst.DevlxdSocket, inst.Details)
	}
	if e.files.n.Load() != 1 {
		t.Errorf("GuestFiles called %d times", e.files.n.Load())
	}
	e.be.mu.Lock()
	var spec *sdk.GuestSpec
	for _, g := range e.be.guests {
		spec = g.spec
	}
	e.be.mu.Unlock()
	if spec == nil || len(spec.Files) != 1 || spec.Config["user.x"] != "y" || spec.UUID != inst.UUID {
		t.Errorf("spec %+v", spec)
	}
	if err := e.m.Start(bg, "web1", api); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("starting a running instance: %v", err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, api); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("stateful stop on a backend without it: %v", err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Timeout: time.Second}, api); err != nil {
		t.Fatal(err)
	}
	inst = e.get("web1")
	if inst.Status != "Stopped" || inst.Link != "" || inst.DevlxdSocket != "" || inst.Boot != 1 {
		t.Errorf("after stop: %+v", inst)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1").Boot; got != 2 {
		t.Errorf("boot %d after the second start", got)
	}
	if err := e.m.Restart(bg, "web1", StopOptions{}, api); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Boot != 3 || got.Status != "Running" {
		t.Errorf("after restart: boot %d %s", got.Boot, got.Status)
	}
	want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceStopped, events.InstanceStarted, events.InstanceRestarted}
	if got := e.actions("web1"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	wantTL := []string{"state ->stopped api: unix root", "state stopped->running api: unix root", "state running->stopped api: unix root",
		"state stopped->running api: unix root", "state running->stopped api: unix root", "state stopped->running api: unix root"}
	if got := e.timeline("web1"); !slices.Equal(got, wantTL) {
		t.Errorf("timeline\n got %v\nwant %v", got, wantTL)
	}
	if got := e.hooks.list(); !slices.Equal(got, []string{"running web1", "stopped web1", "running web1", "stopped web1", "running web1"}) {
		t.Errorf("hooks %v", got)
	}
	if ep := e.hooks.eps[0]; ep == nil || ep.Kind != sdk.LinkHybrid {
		t.Errorf("GuestRunning endpoint %+v", ep)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{}, api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Restart(bg, "web1", StopOptions{}, api); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("restarting a stopped instance: %v", err)
	}
	for _, op := range []func() error{
		func() error { return e.m.Start(bg, "nope", api) },
		func() error { return e.m.Stop(bg, "nope", StopOptions{}, api) },
		func() error { return e.m.Restart(bg, "nope", StopOptions{}, api) },
		func() error { return e.m.Delete(bg, "nope", true, api) },
	} {
		if err := op(); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("operation on a missing instance: %v", err)
		}
	}
}

func TestStartFailure(t *testing.T) {
	tests := []struct {
		name   string
		fail   string
		status string
	}{
		{"guest crashes", "start", "Error"},
		{"bad config", "invalid", "Stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.create("web1", map[string]string{"fake.fail": tt.fail})
			err := e.m.Start(bg, "web1", api)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			inst := e.get("web1")
			if inst.Status != tt.status || inst.Boot != 0 || inst.Details["error"] == "" {
				t.Errorf("after a failed start: %s boot %d details %v", inst.Status, inst.Boot, inst.Details)
			}
			if got := e.actions("web1"); !slices.Equal(got, []string{events.InstanceCreated, events.InstanceError}) {
				t.Errorf("events %v", got)
			}
			tl, _ := e.m.Timeline(bg, "web1", 0)
			if last := tl[len(tl)-1]; !strings.Contains(last.Detail, "start failed") {
				t.Errorf("timeline %+v", last)
			}
			if len(e.hooks.list()) != 0 {
				t.Errorf("hooks %v", e.hooks.list())
			}
			// Fixing the config lets it start.
			if _, err := e.m.UpdateConfig(bg, "web1", nil, []string{"fake.fail"}, api); err != nil {
				t.Fatal(err)
			}
			if err := e.m.Start(bg, "web1", api); err != nil {
				t.Fatal(err)
			}
			if got := e.get("web1"); got.Status != "Running" || got.Details["error"] != "" {
				t.Errorf("after a good start: %s %v", got.Status, got.Details)
			}
		})
	}
}

func TestReady(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	devlxd := events.Requestor{Protocol: "devlxd"}
	if err := e.m.SetReady(bg, inst.UUID, true, devlxd); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Ready while stopped: %v", err)
	}
	if err := e.m.SetReady(bg, "nope", true, devlxd); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Ready for an unknown uuid: %v", err)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	ready := func() {
		t.Helper()
		if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
			t.Fatal(err)
		}
	}
	ready()
	got := e.get("web1")
	if got.Status != "Ready" || got.StatusCode != 113 || got.Config[KeyReady] != "true" || got.ReadyAt == nil || got.ReadyAt.Before(*got.StartedAt) {
		t.Fatalf("after Ready: %s %d %q ready_at %v", got.Status, got.StatusCode, got.Config[KeyReady], got.ReadyAt)
	}
	firstReady := *got.ReadyAt
	stored, _ := e.store.GetInstance(bg, "web1")
	if stored.Config[KeyReady] != "true" {
		t.Errorf("stored ready flag %q", stored.Config[KeyReady])
	}
	ready() // repeats are announced too
	if got := e.get("web1"); !got.ReadyAt.Equal(firstReady) {
		t.Errorf("a repeated Ready moved ready_at")
	}
	for _, f := range []string{"Running", "running", "Ready", "103"} {
		list, err := e.m.List(bg, ListFilter{Status: f})
		if err != nil || len(list) != 1 {
			t.Errorf("List(status=%s) = %d, %v; want the Ready instance", f, len(list), err)
		}
	}
	if list, _ := e.m.List(bg, ListFilter{Status: "Stopped"}); len(list) != 0 {
		t.Errorf("List(Stopped) has %d", len(list))
	}
	unready := func() {
		t.Helper()
		if err := e.m.SetReady(bg, inst.UUID, false, devlxd); err != nil {
			t.Fatal(err)
		}
	}
	unready()
	unready() // no second unready event
	if got := e.get("web1"); got.Status != "Running" || got.Config[KeyReady] != "false" {
		t.Errorf("after Started: %s %q", got.Status, got.Config[KeyReady])
	}
	want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceReady, events.InstanceReady, events.InstanceUnready}
	if got := e.actions("web1"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	recs, _ := e.store.EventsAfter(bg, 0, 0)
	for _, r := range recs {
		ev := events.Event{Type: r.Type}
		_ = ev
		if strings.Contains(string(r.Body), events.InstanceReady+`"`) && !strings.Contains(string(r.Body), `"protocol":"devlxd"`) {
			t.Errorf("instance-ready without the devlxd requestor: %s", r.Body)
		}
	}
	tl := e.timeline("web1")
	if count(tl, "ready false->true devlxd") != 1 || count(tl, "ready true->true devlxd") != 1 || count(tl, "ready true->false devlxd") != 1 {
		t.Errorf("timeline %v", tl)
	}

	clearedBy := []struct {
		name   string
		clear  func()
		status string
		action string
		hook   string
	}{
		{"stop", func() {
			if err := e.m.Stop(bg, "web1", StopOptions{}, api); err != nil {
				t.Fatal(err)
			}
		}, "Stopped", events.InstanceStopped, "stopped web1"},
		{"exit", func() {
			e.be.kill(inst.UUID)
			e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventExited, Time: time.Now()})
		}, "Stopped", events.InstanceStopped, "stopped web1"},
		{"reset", func() {
			e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventReset, Time: time.Now()})
		}, "Running", events.InstanceUnready, "reset web1"},
	}
	for _, tt := range clearedBy {
		t.Run("cleared by "+tt.name, func(t *testing.T) {
			if e.get("web1").Status == "Stopped" {
				if err := e.m.Start(bg, "web1", api); err != nil {
					t.Fatal(err)
				}
			}
			ready()
			tt.clear()
			got := e.get("web1")
			if got.Status != tt.status || got.Config[KeyReady] != "false" || got.ReadyAt != nil {
				t.Errorf("status %s ready %q ready_at %v", got.Status, got.Config[KeyReady], got.ReadyAt)
			}
			acts := e.actions("web1")
			if last := acts[len(acts)-1]; last != tt.action {
				t.Errorf("last event %s, want %s", last, tt.action)
			}
			hooks := e.hooks.list()
			if last := hooks[len(hooks)-1]; last != tt.hook {
				t.Errorf("last hook %s, want %s", last, tt.hook)
			}
		})
	}
	if n := count(e.actions("web1"), events.InstanceReady); n != 5 {
		t.Errorf("%d instance-ready events, want one per Ready (5)", n)
	}

	t.Run("cleared at daemon start", func(t *testing.T) {
		ready()
		readyAt := *e.get("web1").ReadyAt
		m2 := e.manager()
		n := len(e.hooks.list())
		if err := m2.Init(bg); err != nil {
			t.Fatal(err)
		}
		got, err := m2.Get(bg, "web1")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Config[KeyReady]; ok || got.Status != "Running" || got.ReadyAt != nil {
			t.Errorf("after Init: status %s ready %q", got.Status, got.Config[KeyReady])
		}
		if hooks := e.hooks.list()[n:]; !slices.Equal(hooks, []string{"running web1"}) {
			t.Errorf("hooks after Init %v", hooks)
		}
		// The agent re-declares Ready to the new daemon.
		if err := m2.SetReady(bg, inst.UUID, true, devlxd); err != nil {
			t.Fatal(err)
		}
		got, _ = m2.Get(bg, "web1")
		if got.Status != "Ready" {
			t.Errorf("status %s", got.Status)
		}
		// Time-to-ready survives the daemon restart.
		if got.ReadyAt == nil || got.ReadyAt.Sub(readyAt).Abs() > time.Millisecond {
			t.Errorf("ready_at %v after the re-declaration, want %v", got.ReadyAt, readyAt)
		}
		if tl := e.timeline("web1"); tl[len(tl)-1] != "ready ->true devlxd" {
			t.Errorf("timeline %v", tl)
		}
	})
}

func TestBackendEvents(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	// Events of stopped or unknown guests change nothing.
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventExited})
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: "nope", Kind: sdk.EventExited})
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventRingData})
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	// An exit from before this boot is stale.
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventExited, Time: time.Now().Add(-time.Hour)})
	// Another backend cannot stop it.
	e.m.HandleBackendEvent("other", sdk.Event{UUID: inst.UUID, Kind: sdk.EventExited})
	if got := e.get("web1").Status; got != "Running" {
		t.Fatalf("status %s", got)
	}
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventRingData})
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventPortOpened, Port: "com.canonical.lxd"})
	if err := e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.m.HandleBackendEvent("fake", sdk.Event{UUID: inst.UUID, Kind: sdk.EventExited, Detail: "qemu: killed by signal 9"})
	got := e.get("web1")
	if got.Status != "Error" || got.Details["error"] != "qemu: killed by signal 9" || got.Agent.State != AgentNone || got.Link != "" {
		t.Errorf("after a failed exit: %s %v agent %q link %q", got.Status, got.Details, got.Agent.State, got.Link)
	}
	wantHooks := []string{"running web1", "ring-data web1", "port-opened web1", "stopped web1"}
	if h := e.hooks.list(); !slices.Equal(h, wantHooks) {
		t.Errorf("hooks %v, want %v", h, wantHooks)
	}
	tl := e.timeline("web1")
	if tl[len(tl)-1] != "state running->error backend" || !slices.Contains(tl, "agent started-> backend") {
		t.Errorf("timeline %v", tl)
	}
	// An instance in Error can be stopped (cleaned up) and started again.
	if err := e.m.Stop(bg, "web1", StopOptions{Force: true}, api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
}

func TestAgentState(t *testing.T) {
	e := newEnv(t)
	inst := e.create("web1", nil)
	if err := e.m.SetAgentState(bg, inst.UUID, AgentStarted, time.Now()); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("agent state of a stopped instance: %v", err)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		state AgentState
		hb    time.Time
		err   error
		event string // "" none
	}{
		{"started", AgentStarted, time.Unix(100, 0), nil, events.InstanceAgentStarted},
		{"heartbeat only", AgentStarted, time.Unix(200, 0), nil, ""},
		{"connected", AgentConnected, time.Time{}, nil, events.InstanceAgentConnected},
		{"lost", AgentLost, time.Time{}, nil, events.InstanceAgentLost},
		{"connected again", AgentConnected, time.Unix(300, 0), nil, events.InstanceAgentConnected},
		{"stopped", AgentStopped, time.Time{}, nil, events.InstanceAgentStopped},
		{"unknown state", AgentState("dancing"), time.Time{}, errdefs.ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.actions("web1")
			tlBefore := e.timeline("web1")
			prev := e.get("web1").Agent
			err := e.m.SetAgentState(bg, inst.UUID, tt.state, tt.hb)
			if !errors.Is(err, tt.err) {
				t.Fatalf("SetAgentState: %v, want %v", err, tt.err)
			}
			after := e.actions("web1")
			got := e.get("web1")
			if tt.event == "" {
				if len(after) != len(before) {
					t.Errorf("events %v", after[len(before):])
				}
				if len(e.timeline("web1")) != len(tlBefore) {
					t.Error("a timeline entry without a state change")
				}
			} else if len(after) != len(before)+1 || after[len(after)-1] != tt.event {
				t.Errorf("events %v, want one %s", after[len(before):], tt.event)
			}
			if tt.err != nil {
				if !cmp.Equal(got.Agent, prev) {
					t.Errorf("agent changed on a bad call: %+v", got.Agent)
				}
				return
			}
			if got.Agent.State != tt.state || got.Agent.Since == nil {
				t.Errorf("agent %+v", got.Agent)
			}
			if !tt.hb.IsZero() && !got.Agent.LastHeartbeat.Equal(tt.hb) {
				t.Errorf("last heartbeat %v, want %v", got.Agent.LastHeartbeat, tt.hb)
			}
			if tt.hb.IsZero() && !cmp.Equal(got.Agent.LastHeartbeat, prev.LastHeartbeat) {
				t.Errorf("a zero heartbeat changed the last heartbeat")
			}
			if list, _ := e.m.List(bg, ListFilter{Agent: string(tt.state)}); len(list) != 1 {
				t.Errorf("List(agent=%s) = %d", tt.state, len(list))
			}
		})
	}
	if tl := e.timeline("web1"); count(tl, "agent connected->lost agent") != 1 {
		t.Errorf("timeline %v", tl)
	}
	if err := e.m.SetAgentState(bg, "nope", AgentStarted, time.Now()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(bg, "web1", false, api); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("deleting a running instance: %v", err)
	}
	if got := e.get("web1"); got.Status != "Running" || e.be.count() != 1 {
		t.Fatalf("a refused delete changed something: %s, %d guests", got.Status, e.be.count())
	}
	if err := e.m.Delete(bg, "web1", true, api); err != nil {
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
	if err := e.m.Delete(bg, "web1", false, api); err != nil {
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
			_, err := e.m.UpdateConfig(bg, "web1", tt.set, tt.unset, api)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("UpdateConfig: %v, want ErrInvalid", err)
			}
			if got := e.get("web1").Config; !cmp.Equal(got, inst.Config) {
				t.Errorf("config changed: %v", got)
			}
		})
	}
	if _, err := e.m.UpdateConfig(bg, "nope", map[string]string{"user.a": "1"}, nil, api); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing instance: %v", err)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.a": "10", "user.c": "3", "fake.cmd": "x", "user.b": ""}, []string{"user.zz"}, api)
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
	if _, err := e.m.UpdateConfig(bg, "web1", map[string]string{"user.a": "10"}, nil, api); err != nil {
		t.Fatal(err)
	}
	if len(e.actions("web1")) != n || len(e.hooks.chg) != 1 {
		t.Error("a no-op update was announced")
	}
	if acts := e.actions("web1"); acts[len(acts)-1] != events.InstanceUpdated {
		t.Errorf("events %v", acts)
	}
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"alive", "dead", "idle"} {
		e.create(n, nil)
	}
	for _, n := range []string{"alive", "dead"} {
		if err := e.m.Start(bg, n, api); err != nil {
			t.Fatal(err)
		}
	}
	dead := e.get("dead")
	e.be.kill(dead.UUID) // dies while the daemon is down
	m2 := e.manager()
	n := len(e.hooks.list())
	if err := m2.Init(bg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"alive": "Running", "dead": "Stopped", "idle": "Stopped"} {
		got, err := m2.Get(bg, name)
		if err != nil || got.Status != want {
			t.Errorf("%s: %v %v, want %s", name, got.Status, err, want)
		}
	}
	alive, _ := m2.Get(bg, "alive")
	if alive.DevlxdSocket != "/run/recovered/sock" || alive.Link != "hybrid" {
		t.Errorf("recovered view %+v", alive)
	}
	// Guests are recovered in parallel: compare sorted.
	if h := slices.Sorted(slices.Values(e.hooks.list()[n:])); !slices.Equal(h, []string{"running alive", "stopped dead"}) {
		t.Errorf("hooks %v", h)
	}
	tl := e.timeline("dead")
	if tl[len(tl)-1] != "state running->stopped daemon" {
		t.Errorf("timeline %v", tl)
	}
	if acts := e.actions("dead"); acts[len(acts)-1] != events.InstanceStopped {
		t.Errorf("events %v", acts)
	}
	// A plugin restart recovers again; nothing changes for a live guest.
	if err := m2.Recover(bg, "fake"); err != nil {
		t.Fatal(err)
	}
	if err := m2.Recover(bg, "gone"); err != nil {
		t.Errorf("Recover of a backend without instances: %v", err)
	}
	if got, _ := m2.Get(bg, "alive"); got.Status != "Running" || got.Boot != 1 {
		t.Errorf("after a second recover: %s boot %d", got.Status, got.Boot)
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t)
	other := newFakeBackend("other")
	m, err := NewManager(Config{Store: e.store, Backends: fakeBackends{"fake": e.be, "other": other}, Bus: e.bus})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"web1", "web2", "db1", "db2", "cache"} {
		req := CreateRequest{Name: n, Backend: "fake"}
		if n == "cache" {
			req.Backend = "other"
		}
		inst, err := m.Create(bg, req, api)
		if err != nil {
			t.Fatal(err)
		}
		if n != "db2" {
			if err := m.Start(bg, n, api); err != nil {
				t.Fatal(err)
			}
		}
		if n == "web1" {
			if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
				t.Fatal(err)
			}
			if err := m.SetAgentState(bg, inst.UUID, AgentConnected, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		f    ListFilter
		want []string
		err  error
	}{
		{"all", ListFilter{}, []string{"cache", "db1", "db2", "web1", "web2"}, nil},
		{"running includes ready", ListFilter{Status: "Running"}, []string{"cache", "db1", "web1", "web2"}, nil},
		{"ready", ListFilter{Status: "Ready"}, []string{"web1"}, nil},
		{"stopped", ListFilter{Status: "stopped"}, []string{"db2"}, nil},
		{"error", ListFilter{Status: "Error"}, nil, nil},
		{"backend", ListFilter{Backend: "other"}, []string{"cache"}, nil},
		{"agent", ListFilter{Agent: "connected"}, []string{"web1"}, nil},
		{"no agent", ListFilter{Agent: "none"}, []string{"cache", "db1", "db2", "web2"}, nil},
		{"query", ListFilter{Query: "WEB"}, []string{"web1", "web2"}, nil},
		{"combined", ListFilter{Query: "db", Status: "Running"}, []string{"db1"}, nil},
		{"bad status", ListFilter{Status: "Sleeping"}, nil, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := m.List(bg, tt.f)
			if !errors.Is(err, tt.err) {
				t.Fatalf("List: %v, want %v", err, tt.err)
			}
			var got []string
			for _, i := range list {
				got = append(got, i.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			// ListFunc's shared views encode exactly as List's copies.
			var want, viewed []string
			for _, i := range list {
				b, _ := json.Marshal(i)
				want = append(want, string(b))
			}
			err = m.ListFunc(bg, tt.f, func(v *Instance) error {
				b, err := json.Marshal(v)
				viewed = append(viewed, string(b))
				return err
			})
			if !errors.Is(err, tt.err) {
				t.Fatalf("ListFunc: %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(want, viewed); diff != "" {
				t.Errorf("ListFunc views differ from List (-List +ListFunc):\n%s", diff)
			}
		})
	}
	stop := errors.New("stop")
	n := 0
	if err := m.ListFunc(bg, ListFilter{}, func(*Instance) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("ListFunc with fn failing: %v after %d calls, want stop after 1", err, n)
	}
}

func TestConcurrentOperations(t *testing.T) {
	e := newEnv(t)
	e.be.delay = time.Millisecond
	const n = 12
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm%d", i)
		e.create(names[i], nil)
	}
	var wg sync.WaitGroup
	for _, name := range names {
		// Two goroutines per instance race starts, stops and restarts.
		for w := range 2 {
			wg.Go(func() {
				for i := range 6 {
					var err error
					switch (i + w) % 3 {
					case 0:
						err = e.m.Start(bg, name, api)
					case 1:
						err = e.m.Stop(bg, name, StopOptions{}, api)
					case 2:
						err = e.m.Restart(bg, name, StopOptions{}, api)
					}
					if err != nil && !errors.Is(err, errdefs.ErrConflict) {
						t.Errorf("%s: %v", name, err)
					}
					_, _ = e.m.List(bg, ListFilter{Status: "Running"})
				}
			})
		}
	}
	wg.Wait()
	if o := e.be.overlap.Load(); o != 0 {
		t.Errorf("%d backend calls overlapped on one guest", o)
	}
	// Every instance's stored power state matches its guest.
	for _, name := range names {
		inst := e.get(name)
		e.be.mu.Lock()
		var running bool
		for _, g := range e.be.guests {
			if g.uuid == inst.UUID {
				running = g.running
			}
		}
		e.be.mu.Unlock()
		if status.IsRunning(status.Code(inst.StatusCode)) != running {
			t.Errorf("%s: status %s, guest running %v", name, inst.Status, running)
		}
		// The timeline alternates: every transition starts where the last ended.
		tl, err := e.m.Timeline(bg, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(tl); i++ {
			if tl[i].Kind == kindState && tl[i].From != tl[i-1].To {
				t.Errorf("%s timeline breaks at %d: %+v after %+v", name, i, tl[i], tl[i-1])
			}
		}
	}
	// Parallel deletes of all instances, twice each.
	for _, name := range names {
		for range 2 {
			wg.Go(func() {
				err := e.m.Delete(bg, name, true, api)
				if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("delete %s: %v", name, err)
				}
			})
		}
	}
	wg.Wait()
	if list, _ := e.m.List(bg, ListFilter{}); len(list) != 0 || e.be.count() != 0 {
		t.Errorf("%d instances and %d guests left", len(list), e.be.count())
	}
}

// BenchmarkList10k lists 10,000 instances (a quarter running, some Ready).
func BenchmarkList10k(b *testing.B) {
	e := newEnv(b)
	const total = 10000
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				rec := &db.Instance{Name: fmt.Sprintf("vm%05d", i), UUID: newUUID(), Backend: "fake",
					Config:     map[string]string{"user.role": "web", "limits.cpu": "2", "limits.memory": "1GiB"},
					Devices:    map[string]map[string]string{"root": {"type": "disk"}},
					PowerState: status.PowerStopped, Handle: []byte(`{"id":0}`)}
				if i%4 == 0 {
					rec.PowerState = status.PowerRunning
					if i%8 == 0 {
						rec.Config[KeyReady] = "true"
					}
				}
				if err := e.store.CreateInstance(bg, rec); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, f := range []ListFilter{{}, {Status: "Running"}, {Query: "vm0999"}} {
		b.Run(fmt.Sprintf("status=%s,q=%s", f.Status, f.Query), func(b *testing.B) {
			m := e.manager()
			if _, err := m.List(bg, f); err != nil { // loads the cache
				b.Fatal(err)
			}
			b.ResetTimer()
			var n int
			for b.Loop() {
				list, err := m.List(bg, f)
				if err != nil {
					b.Fatal(err)
				}
				n = len(list)
			}
			b.ReportMetric(float64(n), "instances")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
		b.Run(fmt.Sprintf("func/status=%s,q=%s", f.Status, f.Query), func(b *testing.B) {
			m := e.manager()
			if _, err := m.List(bg, f); err != nil { // loads the cache
				b.Fatal(err)
			}
			var n int
			for b.Loop() {
				n = 0
				if err := m.ListFunc(bg, f, func(*Instance) error { n++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "instances")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
	}
}

// BenchmarkAgentStateToEvent measures the time from SetAgentState to the
// instance-agent-* event on a bus subscription (the admin event stream),
// on the real SQLite store.
func BenchmarkAgentStateToEvent(b *testing.B) {
	e := newEnv(b)
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		b.Fatal(err)
	}
	sub, err := e.bus.Subscribe(events.Filter{Instances: []string{"web1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	lat := make([]time.Duration, 0, b.N)
	states := []AgentState{AgentConnected, AgentLost}
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := e.m.SetAgentState(bg, inst.UUID, states[i%2], t0); err != nil {
			b.Fatal(err)
		}
		select {
		case <-sub.C():
			lat = append(lat, time.Since(t0))
		case <-time.After(30 * time.Second):
			b.Fatalf("no event: %v", sub.Err())
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

func TestExitDuringOperations(t *testing.T) {
	t.Run("during start", func(t *testing.T) {
		e := newEnv(t)
		e.create("web1", nil)
		e.be.onStart = func(spec *sdk.GuestSpec) {
			// The guest dies at once; its exit arrives while Start runs.
			e.be.kill(spec.UUID)
			e.m.HandleBackendEvent("fake", sdk.Event{UUID: spec.UUID, Kind: sdk.EventExited, Time: time.Now()})
		}
		if err := e.m.Start(bg, "web1", api); err != nil {
			t.Fatal(err)
		}
		if got := e.get("web1"); got.Status != "Stopped" {
			t.Errorf("status %s after the guest died during start", got.Status)
		}
		want := []string{events.InstanceCreated, events.InstanceStarted, events.InstanceStopped}
		if got := e.actions("web1"); !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if h := e.hooks.list(); !slices.Equal(h, []string{"running web1", "stopped web1"}) {
			t.Errorf("hooks %v", h)
		}
	})
	t.Run("during stop", func(t *testing.T) {
		e := newEnv(t)
		e.create("web1", nil)
		if err := e.m.Start(bg, "web1", api); err != nil {
			t.Fatal(err)
		}
		e.be.onStop = func(uuid string) {
			e.m.HandleBackendEvent("fake", sdk.Event{UUID: uuid, Kind: sdk.EventExited, Time: time.Now()})
		}
		if err := e.m.Stop(bg, "web1", StopOptions{}, api); err != nil {
			t.Fatal(err)
		}
		if n := count(e.actions("web1"), events.InstanceStopped); n != 1 {
			t.Errorf("%d instance-stopped events, want 1", n)
		}
		if got := e.get("web1"); got.Status != "Stopped" {
			t.Errorf("status %s", got.Status)
		}
	})
}

func TestExitDuringRecover(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	e.be.onRecover = func(uuid string) {
		// The guest was running when Recover looked, and exits before the
		// daemon has recorded what Recover found.
		e.m.HandleBackendEvent("fake", sdk.Event{UUID: uuid, Kind: sdk.EventExited, Time: time.Now()})
		e.be.onRecover = nil
	}
	n := len(e.hooks.list())
	if err := e.m.Recover(bg, "fake"); err != nil {
		t.Fatal(err)
	}
	if got := e.get("web1"); got.Status != "Stopped" {
		t.Errorf("status %s", got.Status)
	}
	if h := e.hooks.list()[n:]; !slices.Equal(h, []string{"running web1", "stopped web1"}) {
		t.Errorf("hooks %v", h)
	}
	if c := count(e.actions("web1"), events.InstanceStopped); c != 1 {
		t.Errorf("%d instance-stopped events", c)
	}
}

func TestStatefulStop(t *testing.T) {
	e := newEnv(t)
	e.be.stateful = true
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	e.be.mu.Lock()
	var restored bool
	for _, g := range e.be.guests {
		restored = g.spec.RestoreState
	}
	e.be.mu.Unlock()
	if !restored {
		t.Error("the start after a stateful stop did not restore the state")
	}
	tl := e.timeline("web1")
	if last, _ := e.m.Timeline(bg, "web1", 1); len(last) != 1 || last[0].Detail != "restored" {
		t.Errorf("timeline %v, last %+v", tl, last)
	}
}

// failingStore is the real store with instance updates failing on demand.
type failingStore struct {
	db.Store
	fail atomic.Bool
}

func (s *failingStore) UpdateInstanceWithTimeline(ctx context.Context, in *db.Instance, entries ...*db.TimelineEntry) error {
	if s.fail.Load() {
		return errors.New("disk on fire")
	}
	return s.Store.UpdateInstanceWithTimeline(ctx, in, entries...)
}

func TestStoreFailureChangesNothing(t *testing.T) {
	e := newEnv(t)
	fs := &failingStore{Store: e.store}
	m, err := NewManager(Config{Store: fs, Backends: fakeBackends{"fake": e.be}, Bus: e.bus, Hooks: e.hooks, DefaultBackend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Create(bg, CreateRequest{Name: "web1", Start: true}, api)
	if err != nil {
		t.Fatal(err)
	}
	fs.fail.Store(true)
	if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err == nil {
		t.Fatal("SetReady succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Status != "Running" || got.Ready() {
		t.Errorf("after a failed SetReady: %s", got.Status)
	}
	if n := count(e.actions("web1"), events.InstanceReady); n != 0 {
		t.Errorf("%d instance-ready events for a change that was not saved", n)
	}
	if err := m.Stop(bg, "web1", StopOptions{}, api); err == nil {
		t.Fatal("Stop succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Status == "Stopping" {
		t.Error("the failed stop left the instance Stopping")
	}
	if _, err := m.UpdateConfig(bg, "web1", map[string]string{"user.a": "b"}, nil, api); err == nil {
		t.Fatal("UpdateConfig succeeded with a failing store")
	}
	if got, _ := m.Get(bg, "web1"); got.Config["user.a"] != "" {
		t.Error("a config change that was not saved is visible")
	}
	fs.fail.Store(false)
	if err := m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
}

func TestInitWithMissingBackend(t *testing.T) {
	e := newEnv(t)
	e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	// The daemon restarts without the plugin: it must start anyway.
	m2, err := NewManager(Config{Store: e.store, Backends: fakeBackends{}, Bus: e.bus})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Init(bg); err != nil {
		t.Fatalf("Init with a missing backend: %v", err)
	}
	got, _ := m2.Get(bg, "web1")
	if got.Status != "Error" || !strings.Contains(got.Details["error"], "available") {
		t.Errorf("status %s details %v", got.Status, got.Details)
	}
	// With the plugin back, the guest (still running) is found again.
	m3 := e.manager()
	if err := m3.Init(bg); err != nil {
		t.Fatal(err)
	}
	if got, _ := m3.Get(bg, "web1"); got.Status != "Running" || got.Boot != 1 {
		t.Errorf("status %s boot %d", got.Status, got.Boot)
	}
	if tl := e.timeline("web1"); tl[len(tl)-1] != "state error->running daemon" {
		t.Errorf("timeline %v", tl)
	}
}

func TestStatefulRestoreKeepsReady(t *testing.T) {
	tests := []struct {
		name      string
		ready     bool // declared before the stop
		stateful  bool
		wantReady bool
	}{
		{"ready guest restored", true, true, true},
		{"running guest restored", false, true, false},
		{"ready guest stopped statelessly", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.be.stateful = true
			inst := e.create("web1", nil)
			if err := e.m.Start(bg, "web1", api); err != nil {
				t.Fatal(err)
			}
			if tt.ready {
				if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.m.Stop(bg, "web1", StopOptions{Stateful: tt.stateful}, api); err != nil {
				t.Fatal(err)
			}
			if got := e.get("web1"); got.Ready() || got.Status != "Stopped" {
				t.Fatalf("stopped instance: %s, ready %v", got.Status, got.Ready())
			}
			readyEvents := count(e.actions("web1"), events.InstanceReady)
			if err := e.m.Start(bg, "web1", api); err != nil {
				t.Fatal(err)
			}
			got := e.get("web1")
			if got.Ready() != tt.wantReady {
				t.Errorf("after the start: status %s, ready %v, want ready %v", got.Status, got.Ready(), tt.wantReady)
			}
			if _, ok := got.Config[KeySavedReady]; ok {
				t.Errorf("%s left behind after the start", KeySavedReady)
			}
			if n := count(e.actions("web1"), events.InstanceReady) - readyEvents; (n == 1) != tt.wantReady {
				t.Errorf("%d instance-ready events at the start", n)
			}
			// A second, plain start is a fresh boot: never Ready by itself.
			if err := e.m.Stop(bg, "web1", StopOptions{}, api); err != nil {
				t.Fatal(err)
			}
			if err := e.m.Start(bg, "web1", api); err != nil {
				t.Fatal(err)
			}
			if e.get("web1").Ready() {
				t.Error("a plain start after the restore is Ready")
			}
		})
	}
}

func TestStatelessStartIgnoresSavedState(t *testing.T) {
	e := newEnv(t)
	e.be.stateful = true
	inst := e.create("web1", nil)
	if err := e.m.Start(bg, "web1", api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetReady(bg, inst.UUID, true, events.Requestor{}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Stop(bg, "web1", StopOptions{Stateful: true}, api); err != nil {
		t.Fatal(err)
	}
	if err := e.m.StartWith(bg, "web1", StartOptions{Stateless: true}, api); err != nil {
		t.Fatal(err)
	}
	e.be.mu.Lock()
	var restored bool
	for _, g := range e.be.guests {
		restored = g.spec.RestoreState
	}
	e.be.mu.Unlock()
	if restored {
		t.Error("a stateless start asked the backend to restore the saved state")
	}
	if got := e.get("web1"); got.Ready() || got.Status != "Running" {
		t.Errorf("after a stateless start: %s, ready %v; want Running, not Ready", got.Status, got.Ready())
	}
}
