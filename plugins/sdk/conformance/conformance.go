// Package conformance is the test kit every guestlink backend plugin must
// pass. It runs the plugin binary as a real child process through sdk.Launch,
// exactly as the daemon does, and checks the Backend contract step by step:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Config{
//			PluginPath: pluginBinary, // built by TestMain
//			Spec: func(name, uuid string) *sdk.GuestSpec {
//				return &sdk.GuestSpec{Name: name, UUID: uuid,
//					Config: map[string]string{"sim.command": "sleep 3600"}}
//			},
//			AgentSpec: func(name, uuid string) *sdk.GuestSpec {
//				return &sdk.GuestSpec{Name: name, UUID: uuid,
//					Config: map[string]string{"sim.command": readyCommand}}
//			},
//			Agent: agentBinary, // guestlink-agent
//		})
//	}
//
// A backend passes only if its guests can reach Ready: the Agent subtest
// runs the real guestlink-agent in a guest (AgentSpec; the plugin finds the
// binary through sdk.AgentPath, to which the kit hands Config.Agent in
// sdk.AgentEnv), plays the daemon's side of the guest's hybrid link, and
// checks that the agent's STARTED and CONNECTED reach ReadRing and that
// the guest's Ready declaration reaches the daemon (docs/plugins.md, "What
// the agent needs"). The kit imports nothing but the SDK and the standard
// library. Guests the kit starts are stopped and deleted when their
// subtest ends.
package conformance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// Config says which plugin to check and how to make its guests.
type Config struct {
	// PluginPath is the plugin binary.
	PluginPath string
	// Spec returns the spec of a guest that runs until it is stopped (for
	// the simulated backend, a long sleep). Required.
	Spec func(name, uuid string) *sdk.GuestSpec
	// ExitingSpec returns the spec of a guest that exits by itself within a
	// few seconds, for the Events subtest; nil skips it.
	ExitingSpec func(name, uuid string) *sdk.GuestSpec
	// Timeout bounds each step (each call, each wait); zero means 60s.
	Timeout time.Duration
	// Capabilities the plugin must announce in Info.
	Capabilities []sdk.Capability
	// Launch carries extra launch options (environment, arguments, logger).
	Launch sdk.LaunchOptions
	// AgentSpec returns the spec of a guest that runs the real
	// guestlink-agent and, once the agent answers, declares Ready on its
	// /dev/lxd/sock (guestlink-agent wait-host && guestlink-agent ready);
	// the kit adds the agent's config drive files. The Agent subtest
	// needs it for a backend with a hybrid link: a backend's guests pass
	// the kit only if they reach Ready.
	AgentSpec func(name, uuid string) *sdk.GuestSpec
	// Agent is the guestlink-agent binary the plugin's process guests run,
	// handed to the plugin in sdk.AgentEnv; "" leaves the plugin's own
	// default (sdk.AgentPath). Build it from this repository's
	// cmd/guestlink-agent.
	Agent string
}

// knownCapabilities are the capabilities the contract defines.
var knownCapabilities = []sdk.Capability{
	sdk.CapStateful, sdk.CapLinkHybrid, sdk.CapLinkVsock, sdk.CapLinkSerial, sdk.CapRingBuffer, sdk.CapRecover,
	sdk.CapRingPush,
	sdk.CapSnapshot, sdk.CapSnapshotStateful, sdk.CapMove,
	sdk.CapDisk, sdk.CapNICUser, sdk.CapHotplug,
}

// configTypes are the config key types the contract defines.
var configTypes = []sdk.ConfigType{
	sdk.ConfigString, sdk.ConfigInt, sdk.ConfigBool, sdk.ConfigDuration, sdk.ConfigSize, sdk.ConfigPath, sdk.ConfigEnum,
}

// suite is one run of the kit.
type suite struct {
	cfg    Config
	top    *testing.T // Run's own test, outliving the subtests
	client *sdk.Client
	b      sdk.Backend
	info   *sdk.Info
}

// Run checks the plugin at cfg.PluginPath against the Backend contract in
// named subtests: Info, Lifecycle, Agent, StartTwice, StopStopped, DeleteRunning,
// BadHandle, InvalidConfig, Events, Recover, RecoverStopped, GracefulStop,
// ForceStop, Snapshots and Move.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.PluginPath == "" || cfg.Spec == nil {
		t.Fatal("conformance: Config.PluginPath and Config.Spec are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Agent != "" {
		cfg.Launch.Env = append(append([]string(nil), cfg.Launch.Env...), sdk.AgentEnv+"="+cfg.Agent)
	}
	s := &suite{cfg: cfg, top: t}
	s.client = s.launch(t)
	s.b = s.client.Backend()
	ctx, cancel := s.ctx()
	info, err := s.b.Info(ctx)
	cancel()
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	s.info = info

	t.Run("Info", s.testInfo)
	t.Run("Lifecycle", s.testLifecycle)
	t.Run("Agent", s.testAgent)
	t.Run("StartTwice", s.testStartTwice)
	t.Run("StopStopped", s.testStopStopped)
	t.Run("DeleteRunning", s.testDeleteRunning)
	t.Run("BadHandle", s.testBadHandle)
	t.Run("Hotplug", s.testHotplug)
	t.Run("InvalidConfig", s.testInvalidConfig)
	t.Run("MissingImage", s.testMissingImage)
	t.Run("BadUserNIC", s.testBadUserNIC)
	t.Run("Events", s.testEvents)
	t.Run("Recover", s.testRecover)
	t.Run("RecoverStopped", s.testRecoverStopped)
	t.Run("GracefulStop", s.testGracefulStop)
	t.Run("ForceStop", s.testForceStop)
	t.Run("Snapshots", s.testSnapshots)
	t.Run("Move", s.testMove)
}

func (s *suite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.Timeout)
}

// launch starts a plugin process that is killed when the test ends.
func (s *suite) launch(t *testing.T) *sdk.Client {
	t.Helper()
	c, err := s.launchFor(t)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// launchFor starts a plugin process that is killed when t ends.
func (s *suite) launchFor(t *testing.T) (*sdk.Client, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	c, err := sdk.Launch(ctx, s.cfg.PluginPath, s.cfg.Launch)
	if err != nil {
		return nil, fmt.Errorf("launching plugin: %w", err)
	}
	t.Cleanup(func() {
		pid := c.PID()
		c.Kill()
		if !c.Exited() || processAlive(pid) {
			t.Errorf("plugin process %d still runs after Kill", pid)
		}
	})
	return c, nil
}

// guest is one guest made by a subtest.
type guest struct {
	spec *sdk.GuestSpec
	h    sdk.Handle
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// create makes a guest from spec (cfg.Spec when nil) and arranges for it
// to be force-stopped and deleted when the test ends.
func (s *suite) create(t *testing.T, b sdk.Backend, mk func(name, uuid string) *sdk.GuestSpec) *guest {
	t.Helper()
	if mk == nil {
		mk = s.cfg.Spec
	}
	uuid := newUUID()
	spec := mk("conformance-"+uuid[:8], uuid)
	if spec == nil {
		t.Fatal("conformance: the spec function returned nil")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%q): %v", spec.Name, err)
	}
	if len(h) == 0 {
		t.Fatalf("Create(%q) returned an empty handle", spec.Name)
	}
	g := &guest{spec: spec, h: h}
	t.Cleanup(func() { s.cleanup(t, g) })
	return g
}

// cleanup force-stops and deletes a guest through the suite's plugin,
// launching a new plugin process first if that one died (the subtest
// failed then anyway, and the guest must not be left behind).
func (s *suite) cleanup(t *testing.T, g *guest) {
	ctx, cancel := s.ctx()
	defer cancel()
	remove := func() error {
		if _, err := s.b.Stop(ctx, g.h, sdk.StopOptions{Force: true}); err != nil {
			return fmt.Errorf("force Stop(%q): %w", g.spec.Name, err)
		}
		if err := s.b.Delete(ctx, g.h); err != nil {
			return fmt.Errorf("Delete(%q): %w", g.spec.Name, err)
		}
		return nil
	}
	err := remove()
	if errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("the plugin process died during the test; launching a new one to remove guest %q", g.spec.Name)
		c, lerr := s.launchFor(s.top)
		if lerr != nil {
			t.Errorf("guest %q is left behind: %v", g.spec.Name, lerr)
			return
		}
		s.client, s.b = c, c.Backend()
		err = remove()
	}
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

func (s *suite) start(t *testing.T, b sdk.Backend, g *guest) *sdk.GuestState {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	h, st, err := b.Start(ctx, g.h, g.spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", g.spec.Name, err)
	}
	if len(h) > 0 {
		g.h = h
	}
	if st == nil || st.Status != sdk.StatusRunning {
		t.Fatalf("Start(%q) state = %+v, want running", g.spec.Name, st)
	}
	return st
}

func (s *suite) stop(t *testing.T, b sdk.Backend, g *guest, opts sdk.StopOptions) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	st, err := b.Stop(ctx, g.h, opts)
	if err != nil {
		t.Fatalf("Stop(%q, %+v): %v", g.spec.Name, opts, err)
	}
	if st == nil || st.Status != sdk.StatusStopped {
		t.Fatalf("Stop(%q) state = %+v, want stopped", g.spec.Name, st)
	}
}

func (s *suite) wantStatus(t *testing.T, b sdk.Backend, g *guest, want sdk.Status) *sdk.GuestState {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	st, err := b.State(ctx, g.h)
	if err != nil {
		t.Fatalf("State(%q): %v", g.spec.Name, err)
	}
	if st.Status != want {
		t.Fatalf("State(%q) = %v (%+v), want %v", g.spec.Name, st.Status, st, want)
	}
	return st
}
