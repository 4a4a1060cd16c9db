package conformance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

func (s *suite) testInfo(t *testing.T) {
	if s.info.Name == "" {
		t.Error("Info.Name is empty")
	}
	if s.info.Version == "" {
		t.Error("Info.Version is empty")
	}
	for _, c := range s.info.Capabilities {
		if !slices.Contains(knownCapabilities, c) {
			t.Errorf("Info announces unknown capability %q", c)
		}
	}
	for _, c := range s.cfg.Capabilities {
		if !s.info.Has(c) {
			t.Errorf("Info does not announce capability %q", c)
		}
	}
	for _, p := range s.info.ConfigPrefixes {
		if p == "" || p[len(p)-1] != '.' {
			t.Errorf("config prefix %q does not end with a dot", p)
		}
	}
	// The config schema: every declared key lies under an owned prefix,
	// once, with a known type and a doc (the daemon checks keys against it
	// and shows it in guestlink backends info).
	seen := map[string]bool{}
	for _, k := range s.info.ConfigSchema {
		if !s.info.OwnsConfigKey(k.Name) {
			t.Errorf("Info.ConfigSchema declares %q, which is under none of the config prefixes %q", k.Name, s.info.ConfigPrefixes)
		}
		if seen[k.Name] {
			t.Errorf("Info.ConfigSchema declares %q twice", k.Name)
		}
		seen[k.Name] = true
		if !slices.Contains(configTypes, k.Type) {
			t.Errorf("Info.ConfigSchema: key %q has type %q, want one of %q", k.Name, k.Type, configTypes)
		}
		if strings.TrimSpace(k.Doc) == "" {
			t.Errorf("Info.ConfigSchema: key %q has no doc", k.Name)
		}
	}
	if len(s.info.ConfigPrefixes) > 0 && len(s.info.ConfigSchema) == 0 {
		t.Errorf("Info declares config prefixes %q but no ConfigSchema: declare every key (sdk.Info.ConfigSchema)", s.info.ConfigPrefixes)
	}
	// An empty instance type is an older plugin's answer (the daemon reads
	// it as a virtual machine); anything else must be one of LXD's names.
	switch s.info.InstanceType {
	case "", sdk.InstanceTypeContainer, sdk.InstanceTypeVM:
	default:
		t.Errorf("Info.InstanceType = %q, want %q, %q or empty", s.info.InstanceType, sdk.InstanceTypeContainer, sdk.InstanceTypeVM)
	}
	// What a backend lacks is shown to people: each entry says what.
	for _, m := range s.info.Missing {
		if m.What == "" {
			t.Errorf("Info.Missing has an entry that names nothing: %+v", m)
		}
	}
}

func (s *suite) testLifecycle(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
	s.start(t, s.b, g)
	s.wantStatus(t, s.b, g, sdk.StatusRunning)

	ctx, cancel := s.ctx()
	defer cancel()
	// The link rule the daemon applies too (sdk.CheckLinkEndpoint): a
	// backend that announced link kinds returns an endpoint of one of them;
	// one that announced none has no link and says so with ErrNotSupported.
	ep, err := s.b.LinkEndpoint(ctx, g.h)
	switch {
	case !s.info.HasLink() && !errors.Is(err, sdk.ErrNotSupported):
		t.Fatalf("LinkEndpoint(%q) without a link capability = %+v, %v; want ErrNotSupported", g.spec.Name, ep, err)
	case !s.info.HasLink():
	case err != nil:
		t.Fatalf("LinkEndpoint(%q): %v", g.spec.Name, err)
	default:
		if err := sdk.CheckLinkEndpoint(s.info, ep); err != nil {
			t.Fatalf("LinkEndpoint(%q) = %+v: %v", g.spec.Name, ep, err)
		}
	}

	data, err := s.b.ReadRing(ctx, g.h, 4096)
	switch {
	case s.info.Has(sdk.CapRingBuffer) && err != nil:
		t.Fatalf("ReadRing on a fresh guest: %v", err)
	case !s.info.Has(sdk.CapRingBuffer) && err != nil && !errors.Is(err, sdk.ErrNotSupported):
		t.Fatalf("ReadRing without capability %q = %v, want ErrNotSupported", sdk.CapRingBuffer, err)
	case len(data) > 4096:
		t.Fatalf("ReadRing(max 4096) returned %d bytes", len(data))
	}

	s.stop(t, s.b, g, sdk.StopOptions{Timeout: s.cfg.Timeout / 2})
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
	if err := s.b.Delete(ctx, g.h); err != nil {
		t.Fatalf("Delete(%q): %v", g.spec.Name, err)
	}
}

func (s *suite) testStartTwice(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.start(t, s.b, g)
	ctx, cancel := s.ctx()
	defer cancel()
	if _, _, err := s.b.Start(ctx, g.h, g.spec); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("Start of a running guest = %v, want ErrConflict", err)
	}
	s.wantStatus(t, s.b, g, sdk.StatusRunning)
}

func (s *suite) testStopStopped(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.stop(t, s.b, g, sdk.StopOptions{}) // never started
	s.start(t, s.b, g)
	s.stop(t, s.b, g, sdk.StopOptions{Timeout: s.cfg.Timeout / 2})
	s.stop(t, s.b, g, sdk.StopOptions{}) // again
}

func (s *suite) testDeleteRunning(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.start(t, s.b, g)
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.b.Delete(ctx, g.h); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("Delete of a running guest = %v, want ErrConflict", err)
	}
	s.wantStatus(t, s.b, g, sdk.StatusRunning)
}

func (s *suite) testBadHandle(t *testing.T) {
	handles := map[string]sdk.Handle{
		"empty":   nil,
		"garbage": sdk.Handle("\x00\xffnot a handle{"),
	}
	spec := s.cfg.Spec("conformance-bad", newUUID())
	for hname, h := range handles {
		calls := []struct {
			name        string
			mayPass     bool // Stop and Delete of an unknown guest may succeed
			unsupported bool // the call may be ErrNotSupported: the capability was not announced
			call        func(context.Context) error
		}{
			{"State", false, false, func(ctx context.Context) error { _, err := s.b.State(ctx, h); return err }},
			{"Start", false, false, func(ctx context.Context) error { _, _, err := s.b.Start(ctx, h, spec); return err }},
			{"LinkEndpoint", false, !s.info.HasLink(), func(ctx context.Context) error { _, err := s.b.LinkEndpoint(ctx, h); return err }},
			{"ReadRing", false, !s.info.Has(sdk.CapRingBuffer), func(ctx context.Context) error { _, err := s.b.ReadRing(ctx, h, 16); return err }},
			{"Recover", false, false, func(ctx context.Context) error { _, _, err := s.b.Recover(ctx, h, spec); return err }},
			{"UpdateDevices", false, !s.info.Has(sdk.CapHotplug), func(ctx context.Context) error {
				return s.b.(sdk.DeviceHotplugger).UpdateDevices(ctx, h, nil, []string{"conformance"})
			}},
			{"Stop", true, false, func(ctx context.Context) error { _, err := s.b.Stop(ctx, h, sdk.StopOptions{Force: true}); return err }},
			{"Delete", true, false, func(ctx context.Context) error { return s.b.Delete(ctx, h) }},
		}
		for _, c := range calls {
			t.Run(hname+"/"+c.name, func(t *testing.T) {
				ctx, cancel := s.ctx()
				defer cancel()
				err := c.call(ctx)
				switch {
				case err == nil && c.mayPass:
				case c.unsupported && errors.Is(err, sdk.ErrNotSupported):
				case err == nil:
					t.Fatalf("%s with a %s handle succeeded", c.name, hname)
				case !errors.Is(err, sdk.ErrInvalid) && !errors.Is(err, sdk.ErrNotFound):
					t.Fatalf("%s with a %s handle = %v, want ErrInvalid or ErrNotFound", c.name, hname, err)
				}
			})
		}
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if _, err := s.b.Info(ctx); err != nil || s.client.Exited() {
		t.Fatalf("plugin no longer answers after bad handles: %v", err)
	}
}

func (s *suite) testInvalidConfig(t *testing.T) {
	if len(s.info.ConfigPrefixes) == 0 {
		t.Skip("the plugin owns no config prefix")
	}
	for _, p := range s.info.ConfigPrefixes {
		t.Run(p, func(t *testing.T) {
			spec := s.cfg.Spec("conformance-invalid", newUUID())
			if spec.Config == nil {
				spec.Config = map[string]string{}
			}
			spec.Config[p+"conformance-no-such-key"] = "1"
			ctx, cancel := s.ctx()
			defer cancel()
			h, err := s.b.Create(ctx, spec)
			if !errors.Is(err, sdk.ErrInvalid) {
				if err == nil {
					_ = s.b.Delete(ctx, h)
				}
				t.Fatalf("Create with unknown key %q = %v, want ErrInvalid", p+"conformance-no-such-key", err)
			}
		})
	}
}

// testMissingImage: a backend announcing disk.v1 refuses a guest whose
// image file does not exist with ErrInvalid (and keeps nothing).
func (s *suite) testMissingImage(t *testing.T) {
	if !s.info.Has(sdk.CapDisk) {
		t.Skip("the plugin does not announce disk.v1: the daemon refuses images for it")
	}
	spec := s.cfg.Spec("conformance-image", newUUID())
	spec.Image = &sdk.Image{Fingerprint: strings.Repeat("0", 64), Path: "/nonexistent/guestlink-conformance.img", Format: "raw"}
	ctx, cancel := s.ctx()
	defer cancel()
	h, err := s.b.Create(ctx, spec)
	if !errors.Is(err, sdk.ErrInvalid) {
		if err == nil {
			_ = s.b.Delete(ctx, h)
		}
		t.Fatalf("Create with a missing image file = %v, want ErrInvalid", err)
	}
}

// testBadUserNIC: a backend announcing nic.user.v1 refuses a user nic
// whose forward is malformed with ErrInvalid (and keeps nothing).
func (s *suite) testBadUserNIC(t *testing.T) {
	if !s.info.Has(sdk.CapNICUser) {
		t.Skip("the plugin does not announce nic.user.v1")
	}
	spec := s.cfg.Spec("conformance-nic", newUUID())
	if spec.Devices == nil {
		spec.Devices = map[string]sdk.Device{}
	}
	spec.Devices["eth0"] = sdk.Device{"type": "nic", "nictype": "user", "hostfwd": "tcp::22-:22,guestfwd=tcp:10.0.2.1:1-cmd:sh"}
	ctx, cancel := s.ctx()
	defer cancel()
	h, err := s.b.Create(ctx, spec)
	if !errors.Is(err, sdk.ErrInvalid) {
		if err == nil {
			_ = s.b.Delete(ctx, h)
		}
		t.Fatalf("Create with a malformed hostfwd = %v, want ErrInvalid", err)
	}
}

func (s *suite) testEvents(t *testing.T) {
	if s.cfg.ExitingSpec == nil {
		t.Skip("Config.ExitingSpec is nil")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	events, err := s.b.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	g := s.create(t, s.b, s.cfg.ExitingSpec)
	s.start(t, s.b, g)
	// The daemon shows Stopped or Error by the exit's kind alone
	// (docs/plugins.md): a started guest's exit must say which.
	if ev := waitEvent(t, events, g.spec.UUID, sdk.EventExited); ev.Exit == sdk.ExitUnspecified {
		t.Errorf("EventExited of a started guest does not say how it ended (Event.Exit unspecified; detail %q)", ev.Detail)
	}
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
}

// waitEvent waits for an event of kind about uuid and returns it.
func waitEvent(t *testing.T, events <-chan sdk.Event, uuid string, kind sdk.EventKind) sdk.Event {
	t.Helper()
	for {
		ev, ok := <-events
		if !ok {
			t.Fatalf("event stream ended before %v for %s", kind, uuid)
		}
		if ev.UUID == uuid && ev.Kind == kind {
			return ev
		}
	}
}

func (s *suite) testRecover(t *testing.T) {
	if !s.info.Has(sdk.CapRecover) {
		t.Skipf("the plugin does not announce %q", sdk.CapRecover)
	}
	first := s.launch(t)
	g := s.create(t, first.Backend(), nil) // cleaned up through the suite's plugin
	st := s.start(t, first.Backend(), g)

	if err := syscall.Kill(first.PID(), syscall.SIGKILL); err != nil {
		t.Fatalf("killing plugin %d: %v", first.PID(), err)
	}
	select {
	case <-first.Done():
	case <-time.After(s.cfg.Timeout):
		t.Fatalf("plugin %d did not die of SIGKILL", first.PID())
	}
	if st.PID > 0 && !processAlive(int(st.PID)) {
		t.Fatalf("guest process %d died with its plugin", st.PID)
	}

	second := s.launch(t)
	b := second.Backend()
	ctx, cancel := s.ctx()
	defer cancel()
	h, rst, err := b.Recover(ctx, g.h, g.spec)
	if err != nil {
		t.Fatalf("Recover(%q) in a new plugin process: %v", g.spec.Name, err)
	}
	if len(h) > 0 {
		g.h = h
	}
	if rst.Status != sdk.StatusRunning || (st.PID > 0 && rst.PID != st.PID) {
		t.Fatalf("Recover(%q) = %+v, want running with pid %d", g.spec.Name, rst, st.PID)
	}
	if _, _, err := b.Recover(ctx, g.h, g.spec); err != nil {
		t.Fatalf("second Recover(%q) (must be idempotent): %v", g.spec.Name, err)
	}
	s.wantStatus(t, b, g, sdk.StatusRunning)
	s.stop(t, b, g, sdk.StopOptions{Timeout: s.cfg.Timeout / 2})
	s.wantStatus(t, b, g, sdk.StatusStopped)
}

// testRecoverStopped checks Recover of guests that do not run: the daemon
// calls it for every stored handle.
func (s *suite) testRecoverStopped(t *testing.T) {
	g := s.create(t, s.b, nil)
	recoverGuest := func(when string) {
		t.Helper()
		ctx, cancel := s.ctx()
		defer cancel()
		h, st, err := s.b.Recover(ctx, g.h, g.spec)
		if !s.info.Has(sdk.CapRecover) && errors.Is(err, sdk.ErrNotSupported) {
			return
		}
		if err != nil {
			t.Fatalf("Recover of a %s guest: %v", when, err)
		}
		if st.Status != sdk.StatusStopped {
			t.Fatalf("Recover of a %s guest = %+v, want stopped", when, st)
		}
		if len(h) > 0 {
			g.h = h
		}
	}
	recoverGuest("never started")
	s.start(t, s.b, g)
	s.stop(t, s.b, g, sdk.StopOptions{Force: true})
	recoverGuest("stopped")
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
}

func (s *suite) testGracefulStop(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.start(t, s.b, g)
	budget := s.cfg.Timeout / 2
	began := time.Now()
	s.stop(t, s.b, g, sdk.StopOptions{Timeout: budget})
	if took := time.Since(began); took > budget+s.cfg.Timeout/4 {
		t.Fatalf("graceful Stop took %v, budget %v", took, budget)
	}
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
}

func (s *suite) testForceStop(t *testing.T) {
	g := s.create(t, s.b, nil)
	s.start(t, s.b, g)
	s.stop(t, s.b, g, sdk.StopOptions{Force: true})
	s.wantStatus(t, s.b, g, sdk.StatusStopped)
}

// processAlive reports whether pid exists (signal 0 succeeds).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
